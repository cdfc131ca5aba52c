"""`--cuda-graphs`: the answer steps run as static steps (`test_static_step.py`: every tensor they touch allocated once,
the eager loop's numbers), of which one per batch is recorded as a CUDA graph and replayed for the rest
(`engine.resampling.run_static_steps`; on a GPU only)."""

from __future__ import annotations

import pytest
import torch
from host_reads import counting_replays
from tiny_model import SKY_QUESTION, tiny_family_lm
from torch._dynamo.utils import counters

from beliefdrift.backend import EngineSettings, PathBatch, StepMode, TransformersModel
from beliefdrift.engine import resampling
from beliefdrift.engine.methods import parse_method, run_methods
from beliefdrift.engine.resampling import QuestionRunner, make_generator, sample_answers

METHODS = [parse_method(name) for name in ("ppr", "ppr-seed2", "ppr-seed5")]  # seeds of two lengths: padded paths


def trajectories(lm, template: str) -> tuple[torch.Tensor, torch.Tensor]:
    results = run_methods(lm, SKY_QUESTION, METHODS, paths=3, steps=6, seed=0, template=template)
    return (torch.cat([r.trajectories.answers for r in results]),
            torch.cat([r.trajectories.thetas.float() for r in results]))


def forward_graphs(static: bool, steps: int, template: str) -> int:
    """Graphs dynamo traces of the model's forward pass (shapes static, no compiler) over `steps` answer steps of
    seeded, padded paths."""
    lm = tiny_family_lm("mistral")
    lm.engine = EngineSettings(answer_step=StepMode(static=static))
    runner = QuestionRunner(lm, SKY_QUESTION, template)
    batch = PathBatch.concat([runner.paths(2, torch.tensor([[1, 2], [0, 0]])), runner.paths(2)])
    torch._dynamo.reset()
    counters.clear()
    lm.model.forward = torch.compile(lm.model.forward, backend="eager", dynamic=False)
    sample_answers(batch, steps, make_generator(0))
    return counters["stats"]["unique_graphs"]


def test_static_steps_replay_one_forward_graph_for_every_step(history_template):
    assert forward_graphs(True, 6, history_template) == 1
    assert forward_graphs(False, 3, history_template) > 1, "the growing suffix is a new graph per step (can fail)"


def test_capture_on_a_cpu_runs_the_static_steps_eagerly(history_template, monkeypatch):
    """`capture` asks for CUDA graphs; on a CPU the static steps are run uncaptured (`run_static_steps` is told not to
    capture, so no CUDA call is made), with the numbers of the static steps."""
    asked: list[bool] = []
    run = resampling.run_static_steps
    monkeypatch.setattr(resampling, "run_static_steps",
                        lambda bucket, steps, capture=False: asked.append(capture) or run(bucket, steps, capture))
    results = []
    for capture in (False, True):
        lm = tiny_family_lm("llama")
        lm.engine = EngineSettings(answer_step=StepMode(static=True, capture=capture))
        results.append(trajectories(lm, history_template))
    assert asked and not any(asked)
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


@pytest.mark.cuda
@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt-oss"])  # shared prefix ×2; a cache per path stays eager
def test_graph_replay_equals_the_eager_static_steps(family, history_template):
    """On a GPU, every step of a batch after the warm-up replays one recorded CUDA graph of the static step: the
    answers equal those of the static steps run eagerly and θ agrees to 1e-5 (the same kernels, replayed)."""
    results, replays = [], []
    original = torch.cuda.CUDAGraph.replay
    for capture in (False, True):
        tiny = tiny_family_lm(family)
        lm = TransformersModel(tiny.model.to("cuda"), tiny.tokenizer, tiny.name)
        lm.engine = EngineSettings(answer_step=StepMode(static=True, capture=capture))
        count = [0]

        def counted(graph, count=count):
            count[0] += 1
            return original(graph)

        torch.cuda.CUDAGraph.replay = counted
        try:
            results.append(trajectories(lm, history_template))
        finally:
            torch.cuda.CUDAGraph.replay = original
        replays.append(count[0])
    assert torch.equal(results[0][0], results[1][0])
    torch.testing.assert_close(results[1][1], results[0][1], atol=1e-5, rtol=0)
    # each batch of static steps replays its graph for all but the warm-up steps (a cache per path keeps the loop)
    assert replays[0] == 0 and (replays[1] > 0) == (family != "gpt-oss"), replays
    assert replays[1] % (6 - resampling.CAPTURE_WARM_UP) == 0, replays


@pytest.mark.cuda
def test_evaluate_on_a_gpu_replays_cuda_graphs_by_default(tiny_model_dir, tmp_path, monkeypatch):
    """End to end on a GPU, two questions per batch: by default the steps replay CUDA graphs, and they store the
    answers of the engine without them (`--no-cuda-graphs`) and θ within 1e-5."""
    from beliefdrift.cli.main import main
    from beliefdrift.runs.store import RunStore

    replays = counting_replays(monkeypatch)

    def stored(*flags: str) -> dict:
        out = tmp_path / ("without" if flags else "default")
        argv = ["evaluate", "--model", str(tiny_model_dir), "--dataset", "demo", "-n", "2", "-J", "3", "-N", "6",
                "--methods", "ppr", "ppr-seed2", "--dtype", "float32", "--device", "cuda", "--batch-questions", "2",
                "--bootstrap", "10", "--out", str(out), *flags]
        assert main(argv) == 0
        with RunStore.open(out / "run.sqlite", read_only=True) as store:
            return {(r.question_id, r.method): r for r in store.rows()}

    eager = stored("--no-cuda-graphs")
    assert replays[0] == 0
    graphs = stored()
    assert replays[0] > 0, "the default replayed no CUDA graph"
    assert eager.keys() == graphs.keys() and len(eager) == 4
    for key, row in eager.items():
        assert (row.answers == graphs[key].answers).all(), key
        assert abs(row.thetas - graphs[key].thetas).max() < 1e-5, key
