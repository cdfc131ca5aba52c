"""`--cuda-graphs`: a CUDA graph replays fixed kernels on fixed buffers, so the engine's static suffix caches must give
every decoding step of a batch the same inputs (shapes, cache addresses, no step-dependent Python state) and the
stored numbers of the growing caches. `evaluate --cuda-graphs` on a GPU is tested with `--compile` (test_compile.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tiny_model import SKY_QUESTION, tiny_family_lm
from torch._dynamo.utils import counters, get_static_address_type

from beliefdrift.backend.path_cache import compile_forward, shares_prefix, use_static_suffix
from beliefdrift.engine.methods import parse_method, run_methods
from beliefdrift.engine.resampling import QuestionRunner, make_generator

METHODS = [parse_method(name) for name in ("ppr", "ppr-seed2", "ppr-seed5")]  # seeds of two lengths: padded paths


def trajectories(lm, template: str) -> tuple[torch.Tensor, torch.Tensor]:
    results = run_methods(lm, SKY_QUESTION, METHODS, paths=3, steps=6, seed=0, template=template)
    return (torch.cat([r.trajectories.answers for r in results]),
            torch.cat([r.trajectories.thetas.float() for r in results]))


@pytest.mark.parametrize("family", ["llama", "mistral", "gemma2"])  # plain; sliding window; soft-cap, local+global
def test_static_suffix_stores_the_growing_suffix_numbers(family, history_template):
    static = tiny_family_lm(family)
    use_static_suffix(static.model)
    answers, thetas = trajectories(static, history_template)
    growing_answers, growing_thetas = trajectories(tiny_family_lm(family), history_template)
    assert torch.equal(answers, growing_answers)
    torch.testing.assert_close(thetas, growing_thetas, atol=1e-6, rtol=0)


def test_static_suffix_extends_past_its_room(history_template):
    """Reserving is a hint: a static suffix that runs out of room moves to a larger one."""
    lm = tiny_family_lm("llama")
    use_static_suffix(lm.model)
    runner = QuestionRunner(lm, SKY_QUESTION, history_template)

    def thetas(reserved: int) -> torch.Tensor:
        batch = runner.paths(4, torch.tensor([[0], [1], [2], [1]]))
        batch.reserve(reserved)
        answers = torch.multinomial(torch.ones(4, 3), 5, replacement=True, generator=make_generator(1))
        return torch.stack([batch.advance(answers[:, i]).probs for i in range(5)])

    torch.testing.assert_close(thetas(2), thetas(5), atol=1e-6, rtol=0)


def step_graphs(static: bool, steps: int, history_template: str) -> int:
    """Graphs dynamo traces (shapes static, no compiler) for `steps` decoding steps of seeded, padded paths."""
    lm = tiny_family_lm("mistral")
    shares_prefix(lm.model)  # the probe runs eagerly
    if static:
        use_static_suffix(lm.model)
    runner = QuestionRunner(lm, dataclasses.replace(SKY_QUESTION, stem=SKY_QUESTION.stem * 3), history_template)
    batch = runner.ppr_prompt.concat([runner.paths(2, torch.tensor([[1, 2], [0, 0]])), runner.paths(2)])
    batch.reserve(steps)
    if static:  # a CUDA graph reads the prompt's keys and values in place, not copied before every replay
        assert all(get_static_address_type(t) for t in batch.cache.prompts[0].keys + batch.cache.prompts[0].values)
    torch._dynamo.reset()
    counters.clear()
    lm.model.forward = torch.compile(lm.model.forward, backend="eager", dynamic=False)
    for step in range(steps):
        batch.advance(torch.tensor([step % 3, 1, 2, 0]))
    return counters["stats"]["unique_graphs"]


def test_static_suffix_replays_one_graph_for_every_step(history_template):
    assert step_graphs(True, 6, history_template) == 1
    assert step_graphs(False, 3, history_template) > 1, "the growing suffix is a new graph per step (test can fail)"


def test_only_the_decoding_steps_on_static_suffixes_are_graphed(monkeypatch, history_template):
    """A CUDA graph's outputs live in a pool that its next replay reuses, so a prompt's keys and values made by a
    graphed prefill would be overwritten by the first step: prefills and seed passes run eagerly, and each answer
    step of the batch goes to the graphed forward (recorded here instead of compiled)."""
    graphed: list[tuple[int, ...]] = []

    def record(fn, **options):
        assert options["mode"] == "reduce-overhead"

        def forward(*args, **kwargs):
            graphed.append(tuple(kwargs["input_ids"].shape))
            return fn(*args, **kwargs)

        return forward

    eager = trajectories(tiny_family_lm("llama"), history_template)
    lm = tiny_family_lm("llama")
    monkeypatch.setattr(torch, "compile", record)
    compile_forward(lm.model, cuda_graphs=True)
    answers, thetas = trajectories(lm, history_template)
    assert graphed == [(9, 2)] * 6, graphed  # 3 methods × 3 paths, one answer (label, delimiter) per step
    assert torch.equal(answers, eager[0]) and torch.equal(thetas, eager[1])
