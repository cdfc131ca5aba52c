"""`--compile`: the engine's forward passes under torch.compile give the eager answers and θ up to rounding, and one
set of compiled graphs serves every prompt length (a graph per question would make compiling cost more than it
saves)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tiny_model import SKY_QUESTION, tiny_family_lm
from torch._dynamo.utils import counters

from beliefdrift.backend import EngineSettings
from beliefdrift.engine.methods import parse_method, run_methods
from beliefdrift.engine.resampling import QuestionRunner, make_generator, sample_answers

METHODS = [parse_method(name) for name in ("ppr", "ppr-seed2")]


def paths(results) -> tuple[torch.Tensor, torch.Tensor]:
    """Answers and θ of every path of every method."""
    return (torch.cat([r.trajectories.answers for r in results]),
            torch.cat([r.trajectories.thetas.float() for r in results]))


def test_compiled_engine_matches_eager_with_one_set_of_graphs_for_every_prompt(history_template):
    lm = tiny_family_lm("mistral")  # a sliding window shorter than the prompts, GQA
    questions = [dataclasses.replace(SKY_QUESTION, id=f"q{i}", stem=SKY_QUESTION.stem + " Think." * i)
                 for i in range(3)]
    eager = [paths(run_methods(lm, q, METHODS, paths=3, steps=6, seed=0, template=history_template)) for q in questions]
    torch._dynamo.reset()
    counters.clear()
    lm.engine = EngineSettings(compile=True)
    compiled = [paths(run_methods(lm, questions[0], METHODS, paths=3, steps=6, seed=0, template=history_template))]
    graphs = counters["stats"]["unique_graphs"]
    assert graphs > 0, "nothing was compiled"
    compiled += [paths(run_methods(lm, q, METHODS, paths=3, steps=6, seed=0, template=history_template))
                 for q in questions[1:]]
    assert counters["stats"]["unique_graphs"] == graphs, "a longer prompt compiled new graphs"
    for (answers, thetas), (eager_answers, eager_thetas) in zip(compiled, eager, strict=True):
        assert torch.equal(answers, eager_answers)
        torch.testing.assert_close(thetas, eager_thetas, atol=1e-5, rtol=0)
    assert (eager[0][1] - eager[2][1]).abs().max() > 1e-3, "the questions' θ differ, so a mix-up would show"


def test_compiled_stacked_prompts_need_no_graphs_per_batch(history_template):
    """The GPU's layout (runs of paths attending to their prompts stacked, built with the batch) compiles once for
    batches of other prompts."""
    lm = tiny_family_lm("llama")
    seeds = [torch.tensor([[1, 2], [0, 0]]), torch.tensor([[2], [1]]), torch.empty(2, 0).long()]

    def thetas(first: int) -> torch.Tensor:
        runners = [QuestionRunner(lm, dataclasses.replace(SKY_QUESTION, id=f"q{i}", stem=SKY_QUESTION.stem + " x" * i),
                                  history_template) for i in range(first, first + 3)]
        batch = runners[0].ppr_prompt.concat([r.paths(2, s) for r, s in zip(runners, seeds, strict=True)])
        batch.cache.runs = dataclasses.replace(batch.cache.runs, stack=True)
        assert batch.cache.runs.stackable
        return sample_answers(batch, 4, make_generator(2))[1]

    eager = [thetas(first) for first in (0, 3)]
    torch._dynamo.reset()
    counters.clear()
    lm.engine = EngineSettings(compile=True)
    compiled = [thetas(0)]
    graphs = counters["stats"]["unique_graphs"]
    compiled.append(thetas(3))
    assert counters["stats"]["unique_graphs"] == graphs, "a batch of other prompts compiled new graphs"
    for got, expected in zip(compiled, eager, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_evaluate_compiled_stores_the_eager_results_up_to_rounding(device, tiny_model_dir, tmp_path):
    """End to end, two questions per batch (on a GPU their prompts attend stacked)."""
    from beliefdrift.cli.main import main
    from beliefdrift.runs.store import RunStore

    def stored(*flags: str) -> dict:
        out = tmp_path / ("compiled" if flags else "eager")
        argv = ["evaluate", "--model", str(tiny_model_dir), "--dataset", "demo", "-n", "2", "-J", "3", "-N", "4",
                "--methods", "ppr", "ppr-seed2", "--dtype", "float32", "--device", device, "--batch-questions", "2",
                "--bootstrap", "10", "--out", str(out), *flags]
        assert main(argv) == 0
        with RunStore.open(out / "run.sqlite", read_only=True) as store:
            return {(r.question_id, r.method): r for r in store.rows()}

    torch._dynamo.reset()
    counters.clear()
    eager, compiled = stored(), stored("--compile")
    assert counters["stats"]["unique_graphs"] > 0, "--compile compiled nothing"
    assert eager.keys() == compiled.keys() and len(eager) == 4
    for key, row in eager.items():
        assert (row.answers == compiled[key].answers).all(), key
        assert abs(row.thetas - compiled[key].thetas).max() < 1e-5, key


def test_a_graph_that_fails_to_compile_runs_eagerly(tiny_model_dir, tmp_path, monkeypatch):
    """The compiler failing (no C++ compiler, an unsupported operator) leaves the eager results, bit for bit; the
    errors are suppressed within the engine's compiled calls only: torch's process-wide settings stay as they were,
    and another compiled function still raises its errors."""
    import torch._inductor.compile_fx

    from beliefdrift.cli.main import main
    from beliefdrift.runs.store import RunStore

    attempts = []

    def failing(*args, **kwargs):
        attempts.append(args)
        raise RuntimeError("no compiler here")

    def stored(*flags: str) -> dict:
        out = tmp_path / ("compiled" if flags else "eager")
        assert main(["evaluate", "--model", str(tiny_model_dir), "--dataset", "demo", "-n", "1", "-J", "3", "-N", "3",
                     "--methods", "ppr", "--dtype", "float32", "--bootstrap", "10", "--out", str(out), *flags]) == 0
        with RunStore.open(out / "run.sqlite", read_only=True) as store:
            return {(r.question_id, r.method): r.thetas.tobytes() for r in store.rows()}

    settings = (torch._dynamo.config.suppress_errors, torch._dynamo.config.recompile_limit)
    monkeypatch.setattr(torch._inductor.compile_fx, "compile_fx", failing)
    torch._dynamo.reset()
    assert stored("--compile") == stored()
    assert attempts, "nothing was handed to the compiler"
    assert (torch._dynamo.config.suppress_errors, torch._dynamo.config.recompile_limit) == settings
    with pytest.raises(Exception, match="no compiler here"):
        torch.compile(lambda x: x * 2)(torch.ones(3))


