"""The resampling engine: cached batched θ equals fresh forward passes; sampling follows θ; seeding; RNG."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from host_reads import HostReads
from scipy import stats
from tiny_model import byte_tokenizer, tiny_family_lm

from beliefdrift.backend import AnswerDist, AnswerTokenError, AnswerTokens, resolve_answer_tokens
from beliefdrift.backend.answer_tokens import resolve_single_answer
from beliefdrift.backend.shared_prefix import use_per_path_cache
from beliefdrift.data.registry import load_dataset
from beliefdrift.engine import resampling
from beliefdrift.engine.estimators import answer_frequencies, martingale_posterior_mean, rao_blackwell_mean
from beliefdrift.engine.methods import parse_method, run_methods, run_methods_many
from beliefdrift.engine.resampling import (
    PPRRequest,
    QuestionRunner,
    Trajectories,
    direct_query,
    direct_tokens,
    draw_seeds,
    make_generator,
    ppr_tokens,
    sample_answers,
    up_front_draws,
)
from beliefdrift.prompts import DEFAULT_PPR_TEMPLATE, chat_context


def run_ppr(lm, question, num_paths: int, num_steps: int, generator: torch.Generator, num_seeds: int = 0,
            template: str = DEFAULT_PPR_TEMPLATE) -> Trajectories:
    """PPR (+SEED_m) trajectories of one question, alone."""
    return QuestionRunner(lm, question, template).ppr(num_paths, num_steps, generator, num_seeds)


@pytest.fixture(params=["blockwise", "up front"])
def draws(request, monkeypatch) -> str:
    """Both ways `sample_answers` draws answers (`resampling.answer_draws`), here on the CPU: block by block (the
    CPU's) and up front (every other device's)."""
    if request.param == "up front":
        monkeypatch.setattr(resampling, "answer_draws", up_front_draws)
    return request.param


def fresh_dist(model, tokens: AnswerTokens, answers: list[int]) -> AnswerDist:
    """θ from one uncached forward pass over prompt + the given answers (plain SDPA attention)."""
    dist = fresh_dists(model, tokens, answers, [len(answers)])
    return AnswerDist(dist.probs[0], dist.valid_mass[0])


def fresh_dists(model, tokens: AnswerTokens, answers: list[int], after: list[int]) -> AnswerDist:
    """θ [len(after), K] after each answers[:i], i in `after`, from one uncached forward pass over prompt + answers[
    :max(after)] (plain SDPA attention): causal attention makes the logits at a position those of the sequence cut
    there, so one pass over a path gives every step's fresh θ."""
    pieces = [list(tokens.prompt_ids)] + [list(tokens.answer_ids(a)) for a in answers[: max(after)]]
    ends = np.cumsum([len(piece) for piece in pieces]) - 1  # the last position of the prompt and of each answer
    with torch.no_grad():
        logits = model(torch.tensor([[t for piece in pieces for t in piece]]), attn_implementation="sdpa").logits[0]
    return AnswerDist.from_logits(logits[torch.tensor(ends[after])], torch.tensor(tokens.label_ids))


def assert_matches_fresh(lm, tokens: AnswerTokens, traj: Trajectories, paths, steps) -> None:
    """θ_n and valid_mass of the given paths at the given steps n against fresh forward passes (one per path)."""
    for j in paths:
        seeds = traj.seeds[j].tolist()
        history = seeds + traj.answers[j, : max(steps)].tolist()
        fresh = fresh_dists(lm.model, tokens, history, [len(seeds) + n for n in steps])
        torch.testing.assert_close(traj.thetas[j, steps], fresh.probs, atol=1e-4, rtol=0)
        torch.testing.assert_close(traj.valid_mass[j, steps], fresh.valid_mass, atol=1e-4, rtol=0)


def test_cached_batched_theta_equals_fresh_forward(tiny_lm, question, history_template):
    traj = run_ppr(tiny_lm, question, num_paths=6, num_steps=8, generator=make_generator(0), template=history_template)
    # The comparison below is only meaningful if θ really depends on the history.
    assert (traj.thetas[:, 1:] - traj.thetas[:, :1]).abs().max() > 1e-2
    tokens = ppr_tokens(tiny_lm, question, history_template)
    assert_matches_fresh(tiny_lm, tokens, traj, paths=[0, 3, 5], steps=[0, 1, 4, 8])


def test_long_paper_prompt_matches_fresh_forward(tiny_lm, question):
    traj = run_ppr(tiny_lm, question, num_paths=3, num_steps=3, generator=make_generator(0))
    assert_matches_fresh(tiny_lm, ppr_tokens(tiny_lm, question), traj, paths=[0, 2], steps=[0, 3])


def test_seeded_paths_start_with_their_seeds(tiny_lm, question, history_template):
    traj = run_ppr(tiny_lm, question, num_paths=5, num_steps=4, generator=make_generator(1), num_seeds=3,
                   template=history_template)
    assert traj.seeds.shape == (5, 3) and traj.answers.shape == (5, 4)
    # θ_0 of path j is conditioned on exactly its own seeds, written as its first three answers.
    assert_matches_fresh(tiny_lm, ppr_tokens(tiny_lm, question, history_template), traj, paths=range(5), steps=[0, 2])
    assert len({tuple(s) for s in traj.seeds.tolist()}) > 1, "each path should draw its own seed set"


def test_fork_and_select_copy_paths(tiny_lm, question, history_template):
    tokens = ppr_tokens(tiny_lm, question, history_template)
    batch = QuestionRunner(tiny_lm, question, history_template).paths(3, seeds=torch.tensor([[0, 1], [2, 2], [1, 0]]))
    picked = batch.select([2, 2, 0])
    picked.advance(torch.tensor([3, 1, 1]))
    for got, history in zip(picked.dist.probs, [[1, 0, 3], [1, 0, 1], [0, 1, 1]], strict=True):
        torch.testing.assert_close(got, fresh_dist(tiny_lm.model, tokens, history).probs, atol=1e-4, rtol=0)


def test_direct_query_is_the_prefilled_answer_distribution(tiny_lm, question):
    tokens = direct_tokens(tiny_lm, question)
    assert tiny_lm.tokenizer.decode(tokens.prompt_ids).rstrip().endswith("Answer:")
    expected = fresh_dist(tiny_lm.model, tokens, [])
    got = direct_query(tiny_lm, question)
    torch.testing.assert_close(got.probs, expected.probs, atol=1e-5, rtol=0)
    assert 0 < got.valid_mass <= 1


def test_sampling_frequencies_match_theta(tiny_lm, question, draws):
    batch = QuestionRunner(tiny_lm, question).paths(1, seeds=torch.tensor([[2, 0, 1]]))
    theta = batch.dist.probs[0].double()
    theta = theta / theta.sum()
    draws = 6000
    answers, _, _ = sample_answers(batch.fork(draws), 1, make_generator(7))
    observed = np.bincount(answers[:, 0].numpy(), minlength=theta.numel())
    assert stats.chisquare(observed, (theta * draws).numpy()).pvalue > 1e-3
    # The same counts are far from a distribution that differs from θ by a few points.
    shifted = (theta + torch.tensor([0.04, -0.04, 0.0, 0.0], dtype=torch.float64)).clamp_min(1e-3)
    shifted = shifted / shifted.sum()
    assert stats.chisquare(observed, (shifted * draws).numpy()).pvalue < 1e-3


def test_up_front_draws_of_a_block_ignore_the_other_blocks_and_the_step_count():
    probs = torch.softmax(torch.randn(7, 5, generator=torch.Generator().manual_seed(0)), -1)
    cpu = torch.device("cpu")
    alone = up_front_draws([(3, make_generator(1, "a"))], 5, cpu)
    beside = up_front_draws([(4, make_generator(1, "b")), (3, make_generator(1, "a"))], 9, cpu)
    answers = [alone(probs[4:], step) for step in range(5)]
    assert all(torch.equal(beside(probs, step)[4:], answers[step]) for step in range(5))
    assert len({tuple(a[:, 0].tolist()) for a in answers}) > 1


def test_seeds_follow_the_direct_distribution():
    probs = torch.tensor([0.1, 0.6, 0.3], dtype=torch.float64)
    seeds = draw_seeds(probs, 2000, 3, make_generator(3))
    observed = np.bincount(seeds.flatten().numpy(), minlength=3)
    assert stats.chisquare(observed, (probs * seeds.numel()).numpy()).pvalue > 1e-3
    assert draw_seeds(probs, 4, 0, make_generator(3)).shape == (4, 0)


def test_same_seed_same_trajectories_different_seed_different(tiny_lm, question):
    first = run_ppr(tiny_lm, question, 4, 6, make_generator(11, question.id), num_seeds=2)
    again = run_ppr(tiny_lm, question, 4, 6, make_generator(11, question.id), num_seeds=2)
    other = run_ppr(tiny_lm, question, 4, 6, make_generator(12, question.id), num_seeds=2)
    assert torch.equal(first.answers, again.answers) and torch.equal(first.seeds, again.seeds)
    assert torch.equal(first.thetas, again.thetas)
    assert not torch.equal(torch.cat([first.seeds, first.answers], 1), torch.cat([other.seeds, other.answers], 1))


def test_generator_depends_on_every_key():
    draw = lambda *keys: torch.rand(4, generator=make_generator(*keys))  # noqa: E731
    assert torch.equal(draw(0, "q1", "ppr"), draw(0, "q1", "ppr"))
    assert not torch.equal(draw(0, "q1", "ppr"), draw(0, "q2", "ppr"))
    assert not torch.equal(draw(0, "q1", "ppr"), draw(1, "q1", "ppr"))


def test_q_star_counts_generated_answers_only():
    traj = Trajectories(
        answers=torch.tensor([[1, 1, 2, 1], [2, 2, 2, 2]]),
        thetas=torch.full((2, 5, 3), 1 / 3),
        valid_mass=torch.ones(2, 5),
        seeds=torch.zeros(2, 3, dtype=torch.long),
    )
    expected = torch.tensor([[0, 0.75, 0.25], [0, 0, 1]], dtype=torch.float64)
    torch.testing.assert_close(answer_frequencies(traj), expected)
    torch.testing.assert_close(martingale_posterior_mean(traj), expected.mean(0))


def test_q_star_and_rao_blackwell_agree_in_expectation(tiny_lm, question, history_template):
    traj = run_ppr(tiny_lm, question, num_paths=1500, num_steps=6, generator=make_generator(5),
                   template=history_template)
    per_path_freq = answer_frequencies(traj)
    per_path_rb = traj.thetas[:, :6].double().mean(1)
    diff = per_path_freq - per_path_rb
    standard_error = diff.std(0) / np.sqrt(traj.num_paths)
    assert torch.all((diff.mean(0)).abs() < 4 * standard_error + 1e-9)
    torch.testing.assert_close(rao_blackwell_mean(traj), per_path_rb.mean(0))
    # Rao-Blackwellization lowers the per-path variance.
    assert torch.all(per_path_rb.var(0) <= per_path_freq.var(0))


def test_multi_token_label_is_rejected_with_its_name():
    tokenizer = byte_tokenizer()
    with pytest.raises(AnswerTokenError, match=r"Tokenizer.*label 'Ab' is not a single token"):
        resolve_answer_tokens(tokenizer, "<|im_start|>assistant\n", ["Ab", "C"])
    with pytest.raises(AnswerTokenError, match="'Ab'"):
        resolve_single_answer(tokenizer, "Answer: ", ["Ab", "C"])


def test_answer_tokens_resolved_in_context():
    tokenizer = byte_tokenizer()
    tokens = resolve_answer_tokens(tokenizer, "hello\n", ["A", "B", "C"], delimiter="\n")
    assert tokenizer.decode(tokens.prompt_ids) == "hello\n"
    assert [tokenizer.decode([t]) for t in tokens.label_ids] == ["A", "B", "C"]
    assert tokenizer.decode(tokens.delimiter_ids) == "\n"
    two_token_delimiter = resolve_answer_tokens(tokenizer, "x", ["A", "B"], delimiter=";\n")
    assert two_token_delimiter.step_length == 3


def test_plain_text_fallback_without_chat_template():
    tokenizer = byte_tokenizer(chat_template=None)
    assert chat_context(tokenizer, "Question?", "Answer: ") == "Question?\n\nAnswer: "


@pytest.mark.integration
def test_default_model_cached_theta_equals_fresh_forward(default_lm, question):
    traj = run_ppr(default_lm, question, num_paths=3, num_steps=4, generator=make_generator(0), num_seeds=2)
    assert_matches_fresh(default_lm, ppr_tokens(default_lm, question), traj, paths=[0, 2], steps=[0, 1, 4])
    assert traj.valid_mass.mean() > 0.3, "the default model should mostly follow the answer-list format"


@pytest.mark.integration
def test_default_model_direct_query(default_lm, question):
    dist = direct_query(default_lm, question)
    assert dist.probs.shape == (4,) and abs(float(dist.probs.sum()) - 1) < 1e-5
    assert dist.valid_mass > 0.1


def test_variants_advanced_together_match_fresh_forward(tiny_lm, question, history_template):
    runner = QuestionRunner(tiny_lm, question, history_template)
    requests = [PPRRequest(3, 5, make_generator(0, "ppr")), PPRRequest(2, 3, make_generator(0, "s1"), num_seeds=1),
                PPRRequest(3, 5, make_generator(0, "s4"), num_seeds=4)]
    no_seed, one_seed, four_seeds = runner.ppr_many(requests)
    assert no_seed.seeds.shape == (3, 0) and one_seed.answers.shape == (2, 3) and four_seeds.seeds.shape == (3, 4)
    tokens = ppr_tokens(tiny_lm, question, history_template)
    for traj in (no_seed, one_seed, four_seeds):
        assert_matches_fresh(tiny_lm, tokens, traj, paths=range(traj.num_paths), steps=[0, 1, traj.num_steps])


def test_method_result_does_not_depend_on_other_methods(tiny_lm, question):
    alone = run_methods(tiny_lm, question, [parse_method("ppr-seed2")], paths=4, steps=5, seed=3)[0]
    together = run_methods(tiny_lm, question, [parse_method(m) for m in ("direct", "ppr", "ppr-seed2")], paths=4,
                           steps=5, seed=3)[2]
    assert torch.equal(alone.trajectories.answers, together.trajectories.answers)
    torch.testing.assert_close(alone.probs, together.probs)


def test_reserved_suffix_cache_is_allocated_once_and_changes_no_number(tiny_lm, question, history_template,
                                                                        monkeypatch):
    """`sample_answers` reserves the room of all its steps up front: the suffix buffers never move while the paths
    advance (a step copies only its new tokens), and θ is bit for bit what a cache growing as it goes gives."""
    from beliefdrift.backend import PathBatch

    runner = QuestionRunner(tiny_lm, question, history_template)

    def sample() -> tuple[torch.Tensor, list[set[int]]]:
        batch = runner.paths(4, torch.tensor([[1, 2]] * 4))  # seeded: the suffix already holds tokens
        addresses, advance = [], batch.advance

        def tracked(answers: torch.Tensor) -> AnswerDist:
            dist = advance(answers)
            addresses.append({layer._buffers[0].data_ptr() for layer in batch.cache.suffix.layers})
            return dist

        batch.advance = tracked
        return sample_answers(batch, 40, make_generator(3))[1], addresses

    reserved, still = sample()
    assert len(still) == 40 and all(a == still[0] for a in still)
    monkeypatch.setattr(PathBatch, "reserve", lambda self, answers: None)
    grown, moving = sample()
    assert torch.equal(reserved, grown)
    assert any(a != moving[0] for a in moving), "without the reservation the buffers move as they grow"


def test_a_pass_builds_its_key_masks_once_and_changes_no_number(tiny_lm, question, history_template, monkeypatch):
    """Every layer of one engine pass reads the same key masks, built by the first (per prompt run, here one): a
    step's kernels do not grow with masks per layer, and θ is bit for bit what masks built per layer give."""
    from beliefdrift.backend import path_cache, shared_prefix

    assert path_cache.shares_prefix(tiny_lm.model)  # its probe pass done before counting
    calls = {"passes": 0, "builds": 0}
    build, extend = shared_prefix._hidden_keys, path_cache.SharedPrefixCache.extend

    def counted(name: str, function):
        def call(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return call

    monkeypatch.setattr(shared_prefix, "_hidden_keys", counted("builds", build))
    monkeypatch.setattr(path_cache.SharedPrefixCache, "extend", counted("passes", extend))
    runner = QuestionRunner(tiny_lm, question, history_template)

    def thetas() -> torch.Tensor:
        calls.update(passes=0, builds=0)
        return sample_answers(runner.paths(4, torch.tensor([[1, 2]] * 4)), 6, make_generator(3))[1]

    shared = thetas()
    assert calls["passes"] >= 6 and calls["builds"] == calls["passes"]
    monkeypatch.setattr(path_cache, "AttentionPass", lambda *args: None)  # no masks shared: each layer builds its own
    per_layer = thetas()
    assert tiny_lm.model.config.num_hidden_layers > 1
    assert calls["builds"] == calls["passes"] * tiny_lm.model.config.num_hidden_layers
    assert torch.equal(shared, per_layer)


@pytest.mark.parametrize("cache", ["shared prompt", "cache per path"])
def test_answer_steps_read_nothing_back_to_the_host(history_template, cache, draws):
    """Sampling, seeds, answers and θ stay on the model's device: the host reads of a batch of questions (its
    prefills' θ for the seeds, the results' copy) do not grow with the answers per path (on a GPU, no step waits for
    it; `test_cuda` checks that there)."""
    lm = tiny_family_lm("llama")
    if cache == "cache per path":
        use_per_path_cache(lm.model)
    questions = load_dataset("demo", n=2, seed=0)
    methods = [parse_method(m) for m in ("ppr", "ppr-seed1", "ppr-seed2")]

    def reads(steps: int) -> int:
        with HostReads("cpu") as host:
            run_methods_many(lm, questions, methods, paths=4, steps=steps, seed=0, template=history_template)
        return host.calls

    reads(2)  # one-time work: the probe of the model's attention
    fewer = reads(6)
    assert fewer > 0, "the results' copy to the host is a read: the count must see it"
    assert reads(12) == fewer
