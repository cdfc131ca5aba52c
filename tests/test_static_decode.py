"""The chain-of-thought decoding step as a static step (`cot.decoding.StaticDecode` on `backend.paths.CacheRollouts.
static_steps`), the step a CUDA graph captures: it draws the growing decode's tokens with the same sampler and gives
its hidden states and logits up to float32 rounding on every architecture family, and a step allocates nothing that
outlives it, keeps every buffer where it is, reads nothing back to the host and is one graph for every step. On a GPU
(`cuda` tests) one recorded step replays the rest."""

from __future__ import annotations

import json

import pytest
import torch
from host_reads import assert_a_step_keeps_nothing, counting_replays, traced_graphs
from tiny_model import FAMILIES, tiny_family_lm

from beliefdrift.backend import EngineSettings, StepMode, TransformersModel
from beliefdrift.backend.sampling import NucleusSampler
from beliefdrift.cot import DecodeConfig, PromptCache, decoding, generate_rollouts, nucleus_sampler, render_pair
from beliefdrift.cot.decoding import StaticDecode
from beliefdrift.cot.generation import _end_of_sequence_ids
from beliefdrift.cot.parser import PAIR_SEPARATOR
from beliefdrift.engine.resampling import make_generator

PROMPT = "Solve: two plus three, then explain the sum in a few words.\n"
SEEDS = ["", render_pair("2+3", "5") + PAIR_SEPARATOR, "", render_pair("two and three", "5") + PAIR_SEPARATOR]
#: Guided decoding writes tags instead of drawn tokens (the host feeds them); free decoding runs ahead of the host.
GUIDED = DecodeConfig(num_pairs=2, max_new_tokens=24, guided=True, max_solution_tokens=6, max_answer_tokens=3)
FREE = DecodeConfig(num_pairs=2, max_new_tokens=24)


def rollouts_of(lm: TransformersModel, static: bool, rows: int, config: DecodeConfig, capture: bool = False):
    """`rows` rollouts (seeded ones left-padded) and the logits each draw was made from, [R, V] per step."""
    lm.engine = EngineSettings(decode_step=StepMode(static=static, capture=capture))
    cache = PromptCache.from_text(lm, PROMPT)
    sampler = nucleus_sampler(1.0, 0.9, make_generator(0, "static decode"))
    return generate_rollouts(cache, (SEEDS * rows)[:rows], config, sampler)


@pytest.fixture
def drawn_from(monkeypatch) -> list[torch.Tensor]:
    """The logits of every draw of a `NucleusSampler`, per step or up front."""
    seen: list[torch.Tensor] = []
    call, draw = NucleusSampler.__call__, NucleusSampler.draw
    monkeypatch.setattr(NucleusSampler, "__call__", lambda self, logits: seen.append(logits.clone()) or call(
        self, logits))
    monkeypatch.setattr(NucleusSampler, "draw", lambda self, logits, u: seen.append(logits.clone()) or draw(
        self, logits, u))
    return seen


def static_steps_run(monkeypatch) -> list[int]:
    calls: list[int] = []
    step = StaticDecode.step
    monkeypatch.setattr(StaticDecode, "step", lambda self: calls.append(1) or step(self))
    return calls


@pytest.mark.parametrize("rows, config", [(1, FREE), (8, GUIDED)], ids=["R=1-free", "R=8-guided"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_static_decode_draws_the_growing_decodes_tokens(family, rows, config, drawn_from, monkeypatch):
    """The same sampler draws the same tokens (float32): every rollout's tokens, text and stop are the growing
    decode's; its hidden states and the next-token distributions of each of its draws (while it runs) agree within
    float32 rounding.
    The cache per path (gpt-oss) keeps the growing decode."""
    growing = rollouts_of(tiny_family_lm(family), False, rows, config)
    growing_logits = list(drawn_from)
    drawn_from.clear()
    steps = static_steps_run(monkeypatch)
    static = rollouts_of(tiny_family_lm(family), True, rows, config)
    assert (len(steps) > 0) == (family != "gpt-oss"), "the static step ran (the cache per path keeps its loop)"
    assert any(len(r.token_ids) > 10 for r in growing)
    for r, (got, expected) in enumerate(zip(static, growing, strict=True)):
        assert (got.token_ids, got.text, got.stop, got.forced) == (expected.token_ids, expected.text, expected.stop,
                                                                   expected.forced)
        torch.testing.assert_close(got.hidden, expected.hidden, atol=1e-5, rtol=1e-6)
        for step in range(min(len(expected.token_ids) + 1, len(growing_logits))):  # the draws of its own tokens
            torch.testing.assert_close(drawn_from[step][r].softmax(-1), growing_logits[step][r].softmax(-1),
                                       atol=1e-6, rtol=1e-5)


def test_free_decoding_read_ahead_stops_where_the_growing_decode_stops(drawn_from, monkeypatch):
    """Free decoding runs steps ahead of the host: rollouts ending at end-of-sequence, at their budget and after
    their pairs stop as the growing decode's do, with the same hidden states; the steps run past the end are few."""
    config = DecodeConfig(num_pairs=1, max_new_tokens=40)
    growing = rollouts_of(tiny_family_lm("mistral"), False, 8, config)
    steps = static_steps_run(monkeypatch)
    static = rollouts_of(tiny_family_lm("mistral"), True, 8, config)
    assert {r.stop for r in growing} >= {"eos", "budget"}, "the test needs rollouts stopping for different reasons"
    for got, expected in zip(static, growing, strict=True):
        assert (got.token_ids, got.stop) == (expected.token_ids, expected.stop)
        if expected.hidden is None:
            assert got.hidden is None
        else:
            torch.testing.assert_close(got.hidden, expected.hidden, atol=1e-5, rtol=1e-6)
    passes = max(len(r.token_ids) for r in growing)
    assert passes <= len(steps) <= min(passes + 2 * decoding.READ_AHEAD, config.max_new_tokens)


def started(family: str, rows: int = 4, budget: int = 6) -> tuple[StaticDecode, object]:
    """A static decode of `rows` rollouts (half of them seeded: left padding) after their first pass, and its
    rollouts."""
    lm = tiny_family_lm(family)
    lm.engine = EngineSettings(decode_step=StepMode(static=True))
    cache = PromptCache.from_text(lm, PROMPT)
    rollouts = cache.paths.select(torch.zeros(rows, dtype=torch.long))
    seed = lm.tokenizer("<sol>5", add_special_tokens=False)["input_ids"]
    first = torch.tensor([[cache.prompt_ids[-1], *seed], [0] * len(seed) + [cache.prompt_ids[-1]]] * (rows // 2))
    padding = torch.tensor([0, len(seed)] * (rows // 2))
    banned = sorted(_end_of_sequence_ids(lm))
    logits, _ = rollouts.extend(first, padding, nucleus=(1.0, 0.9, banned))
    sampler = nucleus_sampler(1.0, 0.9, make_generator(0, "started"))
    steps = decoding.decode(rollouts, logits, sampler, banned=banned, nucleus=(1.0, 0.9), budget=budget,
                            hidden=True, dtype=lm.dtype, pad=0, read_ahead=0)
    assert isinstance(steps, StaticDecode)
    return steps, rollouts


def buffers(steps: StaticDecode, rollouts) -> list[torch.Tensor]:
    """Every tensor the steps keep from one to the next."""
    suffix = [t for layer in rollouts.cache.suffix.layers for t in (layer.keys, layer.values, layer.cumulative_length)]
    return [steps.feed, steps.drawn, steps.hidden, steps.count, steps.uniforms, steps.banned, *suffix]


@pytest.mark.parametrize("family", ["llama", "gemma2", "qwen3"])
def test_a_static_decode_step_allocates_nothing_that_outlives_it_and_reads_nothing_back(family):
    """After the first step: no tensor a step allocates survives it, every buffer stays at its address, and no call
    reads a value back to the host (`host_reads.assert_a_step_keeps_nothing`); the step wrote the hidden states and
    the next tokens."""
    steps, rollouts = started(family)
    steps.step()
    assert_a_step_keeps_nothing(steps.step, lambda: buffers(steps, rollouts))
    assert int(steps.count) == 2 and torch.equal(steps.feed, steps.drawn[:, 2])
    assert steps.hidden[:, 1].abs().sum() > 0 and not steps.hidden[:, 2].any()


def test_every_static_decode_step_is_one_graph():
    """After a first step run eagerly (which installs transformers' hooks that collect hidden states, as the warm-up
    before a capture does), dynamo traces the whole step (pass, hidden state, ban, draw, writes) as one graph with no
    break and no second one for later steps; the traced steps draw the eager steps' tokens."""
    eager, _ = started("mistral")
    for _ in range(5):
        eager.step()
    traced, _ = started("mistral")
    traced.step()
    assert traced_graphs(traced.step, 4) == 1
    assert torch.equal(traced.drawn, eager.drawn) and torch.equal(traced.hidden, eager.hidden)


def test_capture_on_a_cpu_runs_the_static_decode_uncaptured():
    """`capture` asks for CUDA graphs; on a CPU the static steps run uncaptured (no CUDA call), drawing the same."""
    plain = rollouts_of(tiny_family_lm("llama"), True, 2, GUIDED)
    captured = rollouts_of(tiny_family_lm("llama"), True, 2, GUIDED, capture=True)
    assert [r.token_ids for r in plain] == [r.token_ids for r in captured]


@pytest.mark.parametrize("temperature, top_p, candidates", [(0.0, 1.0, 256), (1.0, 1.0, 256), (0.8, 0.9, 256),
                                                            (1.5, 0.95, 4)], ids=["greedy", "full", "top", "fallback"])
def test_drawing_up_front_draws_what_each_call_draws(temperature, top_p, candidates):
    """On the CPU, `NucleusSampler.uniforms` then `draw` (the static step's, sorting the whole vocabulary) draw the
    tokens per-call sampling draws from the same generators (a block of rows each in `in_blocks`)."""
    logits = torch.randn(6, 300, generator=torch.Generator().manual_seed(123)) * 4

    def sampler() -> NucleusSampler:
        blocks = [nucleus_sampler(temperature, top_p, make_generator(5, key), candidates) for key in "ab"]
        return NucleusSampler.in_blocks(blocks, 3)

    per_call = sampler()
    expected = [per_call(logits) for _ in range(5)]
    up_front = sampler()
    uniforms = up_front.uniforms(5, 6, logits.device)
    assert [up_front.draw(logits, u).tolist() for u in uniforms] == [e.tolist() for e in expected]
    alone = nucleus_sampler(temperature, top_p, make_generator(5, "b"), candidates)
    assert [alone(logits[3:]).tolist() for _ in range(5)] == [e[3:].tolist() for e in expected]


# ---------------------------------------------------------------------------------------------------- on a GPU


def on_cuda(family: str) -> TransformersModel:
    tiny = tiny_family_lm(family)
    return TransformersModel(tiny.model.to("cuda"), tiny.tokenizer, tiny.name)


@pytest.mark.cuda
@pytest.mark.parametrize("config", [GUIDED, FREE], ids=["guided", "free"])
@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt-oss"])  # shared prefix ×2; a cache per path stays eager
def test_decode_graph_replay_equals_the_uncaptured_static_decode(family, config, monkeypatch):
    """On a GPU, every decoding step after the warm-up replays one recorded CUDA graph of the static step: the tokens
    equal those of the static steps run uncaptured and the hidden states agree to 1e-5 (the same kernels)."""
    uncaptured = rollouts_of(on_cuda(family), True, 4, config)
    replays = counting_replays(monkeypatch)
    captured = rollouts_of(on_cuda(family), True, 4, config, capture=True)
    assert (replays[0] > 0) == (family != "gpt-oss"), replays
    for got, expected in zip(captured, uncaptured, strict=True):
        assert (got.token_ids, got.stop) == (expected.token_ids, expected.stop)
        if expected.hidden is not None:
            torch.testing.assert_close(got.hidden, expected.hidden, atol=1e-5, rtol=0)


@pytest.mark.cuda
def test_reasoning_on_a_gpu_replays_cuda_graphs_by_default(tiny_model_dir, tmp_path, monkeypatch):
    """End to end on a GPU (float32): by default the decoding steps replay CUDA graphs, and they store the rollouts of
    the growing decode (`--no-cuda-graphs`, which on a GPU draws up front too) and its curves within 1e-4."""
    from beliefdrift.cli.main import main

    replays = counting_replays(monkeypatch)

    def stored(*flags: str) -> dict:
        out = tmp_path / ("without" if flags else "default")
        argv = ["reasoning", "--model", str(tiny_model_dir), "--dataset", "demo", "-n", "1", "-J", "2", "-N", "1",
                "-m", "1", "--tau", "1", "--max-new-tokens", "24", "--seed-max-new-tokens", "12", "--dtype", "float32",
                "--device", "cuda", "--out", str(out), *flags]
        assert main(argv) == 0
        return json.loads((out / "summary.json").read_text())

    growing = stored("--no-cuda-graphs")
    assert replays[0] == 0
    graphs = stored()
    assert replays[0] > 0, "the default replayed no CUDA graph"
    for key, condition in growing["conditions"].items():
        assert graphs["conditions"][key]["stops"] == condition["stops"], key
        assert graphs["conditions"][key]["pairs"] == condition["pairs"], key
        for got, expected in zip(graphs["conditions"][key]["curve_mean"], condition["curve_mean"], strict=True):
            assert (got is None and expected is None) or abs(got - expected) < 1e-4, key
