"""`--cuda-graphs`: the answer steps run as static steps (`test_static_step.py`: every tensor they touch allocated once,
the eager loop's numbers) and only their passes on the static suffix go to the graphed forward pass. `evaluate
--cuda-graphs` on a GPU is tested with `--compile` (test_compile.py)."""

from __future__ import annotations

import pytest
import torch
from tiny_model import SKY_QUESTION, tiny_family_lm
from torch._dynamo.utils import counters, get_static_address_type

from beliefdrift.backend import PathBatch
from beliefdrift.backend.path_cache import compile_forward, use_static_steps
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
    use_static_steps(lm.model, static)
    runner = QuestionRunner(lm, SKY_QUESTION, template)
    batch = PathBatch.concat([runner.paths(2, torch.tensor([[1, 2], [0, 0]])), runner.paths(2)])
    torch._dynamo.reset()
    counters.clear()
    lm.model.forward = torch.compile(lm.model.forward, backend="eager", dynamic=False)
    sample_answers(batch, steps, make_generator(0))
    if static:  # a CUDA graph reads the prompt's keys and values in place, not copied before every replay
        assert all(get_static_address_type(t) for t in batch.cache.prompts[0].keys + batch.cache.prompts[0].values)
    return counters["stats"]["unique_graphs"]


def test_static_steps_replay_one_forward_graph_for_every_step(history_template):
    assert forward_graphs(True, 6, history_template) == 1
    assert forward_graphs(False, 3, history_template) > 1, "the growing suffix is a new graph per step (can fail)"


@pytest.mark.parametrize("family", ["llama", "gpt-oss"])  # the shared prefix; a cache per path, which stays eager
def test_only_the_passes_of_static_steps_are_graphed(family, monkeypatch, history_template):
    """A CUDA graph's outputs live in a pool that its next replay reuses, so a prompt's keys and values made by a
    graphed prefill would be overwritten by the first step: prefills and seed passes run eagerly, and each answer
    step of the batch goes to the graphed forward (recorded here instead of compiled). The answers and θ are those of
    the eager engine drawing up front, as a GPU does."""
    graphed: list[tuple[int, ...]] = []

    def record(fn, **options):
        assert options["mode"] == "reduce-overhead"

        def forward(*args, **kwargs):
            graphed.append(tuple(kwargs["input_ids"].shape))
            return fn(*args, **kwargs)

        return forward

    with monkeypatch.context() as patch:
        patch.setattr(resampling, "answer_draws", resampling.up_front_draws)
        eager = trajectories(tiny_family_lm(family), history_template)
    lm = tiny_family_lm(family)
    monkeypatch.setattr(torch, "compile", record)
    compile_forward(lm.model, cuda_graphs=True)
    answers, thetas = trajectories(lm, history_template)
    # 3 methods × 3 paths, one answer (label, delimiter) per step
    assert graphed == ([(9, 2)] * 6 if family == "llama" else []), graphed
    assert torch.equal(answers, eager[0]) and torch.equal(thetas, eager[1])
