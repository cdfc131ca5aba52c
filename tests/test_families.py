"""Every architecture family gives the θ of a plain forward pass (uncached, unpadded, unbatched) through every path
of the engine: PPR with seeds and padding, exact and Monte Carlo k-step predictives, the SC-training conditionals
with their gradients, the chain-of-thought sampler, the per-path fallback, with sliding windows shorter than the
prompt and soft-capped attention."""

from __future__ import annotations

import itertools

import pytest
import torch
import transformers
from tiny_model import FAMILIES, WINDOW, plain_logits, tiny_family_lm
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from beliefdrift.amortize.forward import conditionals
from beliefdrift.backend import AnswerDist, load_model
from beliefdrift.backend.path_cache import shares_prefix
from beliefdrift.backend.shared_prefix import (
    BASE_IMPLEMENTATIONS,
    SHARED_PREFIX_ATTENTION,
    base_implementation,
    shared_prefix_attention,
    use_per_path_cache,
)
from beliefdrift.cot.generation import DecodeConfig, PromptCache, generate_rollouts
from beliefdrift.diagnostics.kstep import kstep_exact, kstep_monte_carlo
from beliefdrift.engine.resampling import PPRRequest, QuestionRunner, make_generator, ppr_tokens, sample_answers

FAMILY_NAMES = list(FAMILIES)


@pytest.fixture(scope="module", params=FAMILY_NAMES)
def family_lm(request):
    return tiny_family_lm(request.param)


def plain_theta(lm, tokens, answers: list[int]) -> torch.Tensor:
    ids = list(tokens.prompt_ids) + [t for a in answers for t in tokens.answer_ids(a)]
    return AnswerDist.from_logits(plain_logits(lm.model, ids), torch.tensor(tokens.label_ids)).probs


def assert_ppr_matches_plain(lm, question, template, atol: float = 1e-4) -> None:
    runner = QuestionRunner(lm, question, template)
    requests = [PPRRequest(2, 5, make_generator(0, "ppr")), PPRRequest(2, 4, make_generator(0, "s1"), num_seeds=1),
                PPRRequest(2, 5, make_generator(0, "s3"), num_seeds=3)]
    tokens = ppr_tokens(lm, question, template)
    thetas = []
    for traj in runner.ppr_many(requests):  # paths of different seed counts advance together, left-padded
        for j, n in itertools.product(range(traj.num_paths), (0, 2, traj.num_steps)):
            history = traj.seeds[j].tolist() + traj.answers[j, :n].tolist()
            torch.testing.assert_close(traj.thetas[j, n], plain_theta(lm, tokens, history), atol=atol, rtol=0)
            thetas.append(traj.thetas[j, n])
    assert torch.stack(thetas).std(0).max() > 1e-2, "θ should depend on the history for the check to mean anything"


def test_ppr_with_seeds_and_padding_matches_plain_forward(family_lm, question, history_template):
    # Every family but gpt-oss (attention sinks) is served by the shared prefix: one whose probe failed under a new
    # transformers release would run on its cache per path with a warning, and fail here.
    assert shares_prefix(family_lm.model) == (family_lm.name != "gpt-oss")
    tokens = ppr_tokens(family_lm, question, history_template)
    if getattr(family_lm.model.config, "sliding_window", None):
        assert len(tokens.prompt_ids) > 4 * WINDOW, "the sliding window must be shorter than the prompt"
    assert_ppr_matches_plain(family_lm, question, history_template)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_bfloat16_ppr_matches_plain_forward_to_bfloat16_rounding(family, question, history_template):
    """In bfloat16, as users run 7–8B models on GPUs: the engine's θ is the plain pass's up to bfloat16 rounding (the
    tiny models' large weights magnify it, hence 0.06; positions off by one exceed that on every shared-prefix
    family)."""
    lm = tiny_family_lm(family)
    lm.model.to(torch.bfloat16)
    assert_ppr_matches_plain(lm, question, history_template, atol=0.06)


@pytest.mark.parametrize("family", ["llama", "mistral", "gemma2"])
def test_per_path_cache_matches_plain_forward(family, question, history_template):
    lm = tiny_family_lm(family)
    use_per_path_cache(lm.model)
    assert_ppr_matches_plain(lm, question, history_template)


@pytest.mark.parametrize("per_path", [False, True])
def test_soft_capped_attention_loaded_on_sdpa_runs_eager(per_path, question, history_template):
    """transformers releases that run Gemma-2 on SDPA (5.17) drop its soft-cap; the engine, which caps, would mix
    two models. Forced onto SDPA here, the model is switched to eager and matches its plain forward pass."""
    lm = tiny_family_lm("gemma2", attn_implementation="eager")
    lm.model.config._attn_implementation_internal = "sdpa"  # as those releases load it
    if per_path:
        use_per_path_cache(lm.model)
    assert_ppr_matches_plain(lm, question, history_template)
    assert base_implementation(lm.model) == "eager"


def test_exact_k_step_predictive_matches_enumerated_plain_forward(family_lm, question, history_template):
    tokens = ppr_tokens(family_lm, question, history_template)
    root = QuestionRunner(family_lm, question, history_template).paths(1, seeds=torch.tensor([[1, 3]]))
    got = kstep_exact(root, horizon=3)
    labels = range(len(tokens.label_ids))
    for k in (1, 2, 3):
        expected = torch.zeros(len(tokens.label_ids), dtype=torch.float64)
        for continuation in itertools.product(labels, repeat=k - 1):
            weight, history = 1.0, [1, 3]
            for answer in continuation:
                weight *= float(plain_theta(family_lm, tokens, history)[answer])
                history = [*history, answer]
            expected += weight * plain_theta(family_lm, tokens, history).double()
        torch.testing.assert_close(got.p(k)[0], expected, atol=1e-4, rtol=0)


def test_monte_carlo_k_step_predictive_is_the_mean_plain_theta_of_its_rollouts(family_lm, question, history_template):
    tokens = ppr_tokens(family_lm, question, history_template)
    root = QuestionRunner(family_lm, question, history_template).paths(1, seeds=torch.tensor([[2]]))
    got = kstep_monte_carlo(root, horizon=3, num_rollouts=4, generator=make_generator(5))
    answers, _, _ = sample_answers(root.select([0] * 4), 2, make_generator(5))  # the same draws
    for k in (1, 2, 3):
        expected = torch.stack([plain_theta(family_lm, tokens, [2, *row[: k - 1]]) for row in answers.tolist()])
        torch.testing.assert_close(got.p(k)[0], expected.double().mean(0), atol=1e-4, rtol=0)


def test_sc_conditionals_and_their_gradients_match_plain_forward(family_lm, question, history_template):
    """log θ and log label mass after every rollout answer (SC training), and ∂(Σ w·log θ + Σ v·log mass)/∂φ."""
    model, tokens = family_lm.model, ppr_tokens(family_lm, question, history_template)
    prefix, rollouts = [1, 3], torch.tensor([[0, 2, 2], [3, 1, 0], [2, 2, 1]])
    weights = torch.Generator().manual_seed(0)
    w = torch.randn(3, 4, len(tokens.label_ids), generator=weights)
    v = torch.randn(3, 4, generator=weights)
    model.zero_grad()
    got = conditionals(model, tokens, prefix, rollouts, micro_batch=2)
    ((got.log_theta * w).sum() + (got.log_mass * v).sum()).backward()
    engine_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    label_ids = torch.tensor(tokens.label_ids)
    total = 0.0
    for j, d in itertools.product(range(3), range(4)):
        answers = prefix + rollouts[j, :d].tolist()
        ids = list(tokens.prompt_ids) + [t for a in answers for t in tokens.answer_ids(a)]
        logits = model(torch.tensor([ids])).logits[0, -1].float()
        log_theta = logits[label_ids].log_softmax(-1)
        log_mass = logits[label_ids].logsumexp(-1) - logits.logsumexp(-1)
        torch.testing.assert_close(got.log_theta[j, d].detach(), log_theta.detach(), atol=1e-4, rtol=0)
        torch.testing.assert_close(got.log_mass[j, d].detach(), log_mass.detach(), atol=1e-4, rtol=0)
        total = total + (log_theta * w[j, d]).sum() + log_mass * v[j, d]
    total.backward()
    for param, engine in zip(model.parameters(), engine_grads, strict=True):
        torch.testing.assert_close(engine, param.grad, atol=1e-4, rtol=1e-3)
    model.zero_grad()


def test_reasoning_sampler_next_token_distribution_matches_plain_forward(family_lm):
    tokenizer = family_lm.tokenizer
    cache = PromptCache.from_text(family_lm, "Solve: two plus three, then explain the sum in a few words.\n")
    seeds = ["", "<sol>2+3</sol>\n<ans>5</ans>\n\n"]  # ragged first step: the first rollout is left-padded
    seen: list[torch.Tensor] = []

    def greedy(logits: torch.Tensor) -> torch.Tensor:
        seen.append(logits.float().log_softmax(-1))
        return logits.argmax(-1)

    rollouts = generate_rollouts(cache, seeds, DecodeConfig(num_pairs=1, max_new_tokens=8), greedy, False)
    assert len(cache.prompt_ids) > WINDOW
    for r, (seed, rollout) in enumerate(zip(seeds, rollouts, strict=True)):
        context = list(cache.prompt_ids) + tokenizer(seed, add_special_tokens=False)["input_ids"]
        for t in range(len(rollout.token_ids)):
            expected = plain_logits(family_lm.model, context + rollout.token_ids[:t]).float().log_softmax(-1)
            torch.testing.assert_close(seen[t][r], expected, atol=1e-4, rtol=0)


def test_unservable_model_falls_back_once_with_a_message(question, history_template, caplog):
    lm = tiny_family_lm("gpt-oss")
    assert_ppr_matches_plain(lm, question, history_template)
    assert_ppr_matches_plain(lm, question, history_template)
    assert caplog.text.count("cannot share one prompt cache between paths (attention sinks)") == 1


@pytest.mark.parametrize(("family", "dtype"), [("llama", torch.float32), ("qwen3", torch.bfloat16)])
def test_a_transformers_change_that_would_move_theta_leaves_the_shared_prefix(family, dtype, monkeypatch, caplog,
                                                                              question, history_template):
    """The first use of a model checks the shared prefix's next-token probabilities against the model's own forward
    pass (`shared_prefix._probe`). Here transformers hands the engine's attention a scale 1.5 times too large, as a
    release that moved what the attention interface passes would: the model is served by its cache per path instead,
    with a warning naming the transformers version, and θ stays the plain forward pass's."""
    moved = []

    def misread(module, query, key, value, attention_mask, scaling=None, **kwargs):
        if kwargs.get("shared_prefix") is not None:
            moved.append(module.layer_idx)
            scaling = 1.5 * (scaling if scaling is not None else query.shape[-1] ** -0.5)
        return shared_prefix_attention(module, query, key, value, attention_mask, scaling=scaling, **kwargs)

    for tag in BASE_IMPLEMENTATIONS:
        monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS, f"{SHARED_PREFIX_ATTENTION}_{tag}", misread)
    lm = tiny_family_lm(family)
    lm.model.to(dtype)
    assert not shares_prefix(lm.model) and moved, "the probe ran through the misreading attention"
    message = caplog.text
    assert "differ from the model's own forward pass by" in message and f"transformers {transformers.__version__}" \
        in message and "using a full cache per path" in message, message
    assert_ppr_matches_plain(lm, question, history_template, atol=1e-4 if dtype == torch.float32 else 0.06)


def test_the_users_attention_implementation_runs_every_other_forward_pass(question, history_template):
    lm = tiny_family_lm("llama", attn_implementation="eager")
    twin = tiny_family_lm("llama", attn_implementation="eager")
    ids = ppr_tokens(lm, question, history_template).prompt_ids
    QuestionRunner(lm, question, history_template).ppr(2, 2, make_generator(0))
    assert lm.model.config._attn_implementation == f"{SHARED_PREFIX_ATTENTION}_eager"
    assert base_implementation(lm.model) == "eager"
    attentions = lm.model(torch.tensor([ids]), output_attentions=True).attentions  # eager returns its weights
    assert all(a is not None for a in attentions)
    assert torch.equal(plain_logits(lm.model, ids), plain_logits(twin.model, ids))


def test_device_map_leaves_theta_unchanged(tiny_model_dir, tmp_path, question, history_template):
    """A model split over the CPU and disk (accelerate's offload hooks) gives the engine's θ bit for bit."""
    whole = load_model(str(tiny_model_dir), dtype="float32")
    layout = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk", "model.norm": "cpu",
              "model.rotary_emb": "cpu", "lm_head": "cpu"}
    split = load_model(str(tiny_model_dir), dtype="float32", device_map=layout)
    assert "disk" in split.model.hf_device_map.values()
    runs = [QuestionRunner(lm, question, history_template).ppr(3, 4, make_generator(1), num_seeds=2)
            for lm in (whole, split)]
    assert torch.equal(runs[0].answers, runs[1].answers)
    torch.testing.assert_close(runs[0].thetas, runs[1].thetas, atol=1e-6, rtol=0)
