"""The static answer step (`engine.resampling.StaticSteps` on `backend.path_cache.StaticPasses`), the step a CUDA graph
is to capture: it stores the eager loop's numbers (drawing up front, as a GPU does) bit for bit on every architecture
family, and a step allocates nothing that outlives it, keeps every buffer where it is, reads nothing back to the host
and is one graph for every step (dynamo's full-graph trace, no compiler: what the CPU can check of a capture)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import pytest
import torch
from host_reads import assert_a_step_keeps_nothing, traced_graphs
from tiny_model import FAMILIES, SKY_QUESTION, tiny_family_lm

from beliefdrift.backend import EngineSettings, PathBatch, StepMode, load_model
from beliefdrift.backend.path_cache import shares_prefix
from beliefdrift.config.diagnostics import DriftConfig
from beliefdrift.config.evaluate import EvalConfig
from beliefdrift.engine import resampling
from beliefdrift.engine.methods import parse_method, run_methods_many
from beliefdrift.engine.resampling import QuestionRunner, StaticSteps, make_generator, up_front_uniforms
from beliefdrift.runs.diagnostics import run_drift
from beliefdrift.runs.evaluate import run_evaluation
from beliefdrift.runs.store import RunStore

METHODS = [parse_method(name) for name in ("ppr", "ppr-seed1", "ppr-seed3")]  # seeds of two lengths: padded paths
QUESTIONS = [dataclasses.replace(SKY_QUESTION, id=f"q{i}", stem=SKY_QUESTION.stem + " Think." * i) for i in range(2)]
SHARED = [family for family in FAMILIES if family != "gpt-oss"]  # gpt-oss keeps a cache per path


@pytest.fixture
def up_front(monkeypatch) -> None:
    """The eager loop drawing up front on the CPU too (as on a GPU), the draws the static step makes."""
    monkeypatch.setattr(resampling, "answer_draws", resampling.up_front_draws)


def static_step_count(monkeypatch) -> list[int]:
    calls: list[int] = []
    step = StaticSteps.step
    monkeypatch.setattr(StaticSteps, "step", lambda self: calls.append(1) or step(self))
    return calls


@pytest.mark.parametrize("family", list(FAMILIES))
def test_static_steps_store_the_eager_numbers(family, up_front, monkeypatch, history_template):
    """Two questions in one batch, PPR and SEED_1/SEED_3 paths (left-padded): the seeds and answers of every path are
    the eager loop's, and θ and the label masses equal it up to float32 rounding (the softmax and the products also
    read the static suffix's empty slots, with weight zero; on these models, bit for bit)."""

    def paths(static: bool) -> list[torch.Tensor]:
        lm = tiny_family_lm(family)
        lm.engine = EngineSettings(answer_step=StepMode(static=static))
        results = run_methods_many(lm, QUESTIONS, METHODS, paths=3, steps=5, seed=0, template=history_template)
        return [part for question in results for r in question for part in (
            r.trajectories.seeds, r.trajectories.answers, r.trajectories.thetas, r.trajectories.valid_mass)]

    eager = paths(False)
    steps = static_step_count(monkeypatch)
    static = paths(True)
    assert len(steps) == (0 if family == "gpt-oss" else 5), "the static step ran (the cache per path keeps its loop)"
    for got, expected in zip(static, eager, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    first, second = eager[2], eager[2 + 4 * len(METHODS)]  # θ of each question's PPR paths
    assert (first - second).abs().max() > 1e-3, "the two questions' θ differ, so a mix-up would show"


def bucket(family: str, template: str, steps: int = 4) -> tuple[StaticSteps, PathBatch]:
    """A batch of two questions' paths, one of them seeded (left padding), ready for `steps` static steps."""
    lm = tiny_family_lm(family)
    lm.engine = EngineSettings(answer_step=StepMode(static=True))
    runners = [QuestionRunner(lm, question, template) for question in QUESTIONS]
    batch = PathBatch.concat([runners[0].paths(2, torch.tensor([[1, 2], [0, 3]])), runners[1].paths(2)])
    uniforms = up_front_uniforms([(2, make_generator(0, "a")), (2, make_generator(0, "b"))], steps, torch.device("cpu"))
    return StaticSteps(batch.dist, uniforms, batch.static_steps(steps)), batch


def buffers(static: StaticSteps, batch: PathBatch) -> list[torch.Tensor]:
    """Every tensor the steps keep from one to the next."""
    suffix = [t for layer in batch.cache.suffix.layers for t in (layer.keys, layer.values, layer.cumulative_length)]
    return [static.answers, static.thetas, static.masses, static.count, static.uniforms, *suffix]


@pytest.mark.parametrize("family", SHARED)
def test_a_static_step_allocates_nothing_that_outlives_it_and_reads_nothing_back(family, history_template):
    """After the first step: no tensor a step allocates survives it, every buffer stays at its address, and no call
    reads a value back to the host (`host_reads.assert_a_step_keeps_nothing`)."""
    static, batch = bucket(family, history_template)
    static.step()
    answers = static.answers.clone()
    assert_a_step_keeps_nothing(static.step, lambda: buffers(static, batch))
    assert int(static.count) == 2 and torch.equal(static.answers[:, 0], answers[:, 0])
    assert not torch.equal(static.thetas[:, 2], torch.zeros_like(static.thetas[:, 2])), "the step wrote θ_2"


@pytest.mark.parametrize("family", ["llama", "mistral", "gemma2"])  # plain; sliding window; soft-cap, local+global
def test_every_static_step_is_one_graph(family, history_template):
    """dynamo traces the whole step (draw, pass, writes) as one graph with no break (`fullgraph`: a host read, a branch
    on a value or an unsupported call would fail it) and traces no second one for later steps (no shape, address
    or Python value of the step changes with n); the traced steps give the eager steps' numbers."""
    eager, _ = bucket(family, history_template)
    for _ in range(4):
        eager.step()
    traced, _ = bucket(family, history_template)
    assert traced_graphs(traced.step, 4) == 1
    assert torch.equal(traced.answers, eager.answers) and torch.equal(traced.thetas, eager.thetas)


def test_a_cache_taken_by_static_passes_is_not_extended_eagerly(history_template):
    _, batch = bucket("llama", history_template)
    with pytest.raises(ValueError, match="static passes"):
        batch.advance(torch.tensor([0, 1, 2, 3]))


def test_stored_results_and_records_equal_the_eager_engines(up_front, tiny_model_dir, tmp_path, history_template):
    """End to end through evaluate (two questions per batch) and drift: the stored rows and records of the static
    steps are the eager loop's (drawing up front): the same answers and seeds, θ and estimates within 1e-6."""
    settings = dict(model=str(tiny_model_dir), dataset="demo", n=2, paths=3, steps=4, dtype="float32",
                    template=history_template, batch_questions=2)

    def stored(static: bool) -> tuple[dict, dict]:
        lm = load_model(str(tiny_model_dir), dtype="float32")
        assert shares_prefix(lm.model)
        lm.engine = EngineSettings(answer_step=StepMode(static=static))
        out = tmp_path / ("static" if static else "eager")
        config = EvalConfig(**settings, methods=["direct", "ppr", "ppr-seed2"], out=out / "evaluate")
        with RunStore.open(run_evaluation(config, progress=False, lm=lm), read_only=True) as store:
            rows = {(r.question_id, r.method): dataclasses.replace(r, seconds=0.0) for r in store.rows()}
        drift = run_drift(DriftConfig(**settings, methods=["ppr", "ppr-seed1"], out=out / "drift"), lm=lm,
                          progress=False)
        with RunStore.open(drift.path, read_only=True) as store:
            records = {(q.id, m.name): store.records(q.id, m.name) for q in drift.questions for m in drift.methods}
        return rows, records

    def same(a: object, b: object) -> bool:
        if isinstance(a, np.ndarray):
            exact = a.dtype.kind in "iu"  # answers, seeds, targets
            return a.dtype == b.dtype and a.shape == b.shape and np.allclose(a, b, rtol=0, atol=0 if exact else 1e-6)
        if isinstance(a, Mapping):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, float):
            return abs(a - b) <= 1e-6
        return a == b

    eager, static = stored(False), stored(True)
    assert len(eager[0]) == 6 and len(eager[1]) == 4 and all(eager[1].values())
    assert eager[0].keys() == static[0].keys()
    for key, row in eager[0].items():
        for field in dataclasses.fields(row):
            assert same(getattr(static[0][key], field.name), getattr(row, field.name)), (key, field.name)
    for key, records in eager[1].items():
        assert records.keys() == static[1][key].keys(), key
        for quantity, value in records.items():
            got, expected = (np.asarray(v, dtype=float) for v in (static[1][key][quantity], value))
            assert np.allclose(got, expected, rtol=0, atol=1e-6), quantity
