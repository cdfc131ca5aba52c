"""The engine under `--compile` (torch.compile of the model's forward passes) vs eager, in one run.

    python bench/compile.py [--shape tiny] [--device cpu] [--paths 8] [--steps 20]
    python bench/compile.py --shape llama-3.1-8b --device cuda --paths 32 --steps 100 [--static-steps]
    python bench/compile.py --model smollm2-135m-instruct --paths 32   # a real model instead of random weights
    python bench/compile.py --families [--static-steps]

Runs PPR, SEED_1 and SEED_5 (J paths each) on one demo question with `--model` or random weights of `--shape`
(`bench/rollout.py`'s shapes), first eager, then compiled as `--compile` does (`EngineSettings.compile`; with
`--static-steps` both on static steps drawing up front, the passes a CUDA graph records): compile time (the first
compiled run), ms/step of each (runs of 2N and N answers differenced, best of 3), how many answers agree and the
largest θ difference while a path's answers agree (compiled kernels round differently). A failure to compile is
reported with its first line.

`--families` checks every architecture family of the test suite (its tiny random configs, CPU, float32) instead: the
graphs compiled for a first question, those added by two more questions (other prompt lengths) and a batch of two, and
the agreement with eager over all of them. With `--static-steps`, inductor compiles the passes of the static steps
(prefills stay eager): a check that every family traces them. `bench/cuda_graphs.py` times `--cuda-graphs` itself.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from rollout import SHAPES, TOKENIZER_HELP, shaped_model, three_methods, timed
from torch._dynamo.utils import counters

from beliefdrift.backend import EngineSettings, StepMode, load_model
from beliefdrift.backend.loading import resolve_device, resolve_dtype
from beliefdrift.backend.path_cache import shares_prefix
from beliefdrift.data.registry import load_dataset
from beliefdrift.errors import first_line


def trajectories(lm, questions: list, paths: int, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Answers [3J·Q, N] and θ [3J·Q, N+1, K] of every path of the three methods on `questions`, advanced together."""
    results = [r for per_question in three_methods(lm, questions, paths, steps) for r in per_question]
    return (torch.cat([r.trajectories.answers for r in results]),
            torch.cat([r.trajectories.thetas.float() for r in results]))


def agreement(eager: list[tuple[torch.Tensor, torch.Tensor]], compiled: list[tuple[torch.Tensor, torch.Tensor]]) -> str:
    """How many answers agree over all runs, and the largest θ difference while a path's answers so far agree (a
    rounding difference can flip a later draw)."""
    equal, total, largest = 0, 0, 0.0
    for (eager_answers, eager_thetas), (answers, thetas) in zip(eager, compiled, strict=True):
        same = answers == eager_answers
        agree = torch.cat([torch.ones_like(answers[:, :1]), same.long().cumprod(1)], 1).bool()
        equal, total = equal + int(same.sum()), total + same.numel()
        largest = max(largest, float((thetas - eager_thetas).abs().amax(-1)[agree].max()))
    return f"answers equal {equal / total:.1%}; largest θ difference while they agree {largest:.2e}"


def speed(args: argparse.Namespace) -> None:
    device = resolve_device(args.device)
    torch.manual_seed(0)
    if args.model:
        lm = load_model(args.model, device=args.device, dtype=args.dtype)
    else:
        lm = shaped_model(args.shape, device, resolve_dtype(args.dtype, device), args.tokenizer)
    question = load_dataset("demo", n=1, seed=0)[0]
    static = StepMode(static=args.static_steps)  # eager against compiled, both on static steps drawing up front
    lm.engine = EngineSettings(answer_step=static)

    def ms_per_step() -> float:
        best = [min(timed(device, lambda n=n: trajectories(lm, [question], args.paths, n)) for _ in range(3))
                for n in (2 * args.steps, args.steps)]
        return (best[0] - best[1]) / args.steps * 1e3

    eager_paths = trajectories(lm, [question], args.paths, args.steps)
    eager = ms_per_step()
    print(f"{args.model or args.shape} on {device}, 3 methods × {args.paths} paths: eager {eager:.1f} ms/step")
    lm.engine = EngineSettings(compile=True, answer_step=static)
    start = time.perf_counter()
    try:
        compiled_paths = trajectories(lm, [question], args.paths, args.steps)
    except Exception as err:  # the finding is the failure itself
        print(f"torch.compile failed after {time.perf_counter() - start:.0f} s: {type(err).__name__}: "
              f"{first_line(err)}")
        return
    print(f"first compiled run (compiles) {time.perf_counter() - start:.0f} s")
    compiled = ms_per_step()
    print(f"compiled{' on static steps' * args.static_steps} {compiled:.1f} ms/step ({eager / compiled:.2f}x eager); "
          f"{agreement([eager_paths], [compiled_paths])}")


def families(static_steps: bool, paths: int = 4, steps: int = 6) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tiny_model import FAMILIES, tiny_family_lm

    questions = load_dataset("demo", n=3, seed=0)
    batches = [[q] for q in questions] + [questions[:2]]
    for family in FAMILIES:
        lm = tiny_family_lm(family)
        lm.engine = EngineSettings(answer_step=StepMode(static=static_steps))
        eager = [trajectories(lm, batch, paths, steps) for batch in batches]
        torch._dynamo.reset()
        counters.clear()
        lm.engine = EngineSettings(compile=True, answer_step=StepMode(static=static_steps))
        start = time.perf_counter()
        compiled = [trajectories(lm, batches[0], paths, steps)]
        seconds, first = time.perf_counter() - start, counters["stats"]["unique_graphs"]
        compiled += [trajectories(lm, batch, paths, steps) for batch in batches[1:]]
        print(f"{family:8} ({'shared prefix' if shares_prefix(lm.model) else 'cache per path'}): {first} graphs in "
              f"{seconds:.0f} s for a first question, +{counters['stats']['unique_graphs'] - first} for two more and a "
              f"batch of two; {agreement(eager, compiled)}",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--model", help="a model to load (registry name, directory, hub id) instead of --shape")
    parser.add_argument("--tokenizer", help=TOKENIZER_HELP)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--paths", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--families", action="store_true", help="every architecture family of the test suite")
    parser.add_argument("--static-steps", action="store_true", help="compile the passes of static steps (one graph "
                        "for every step, what a CUDA graph records)")
    args = parser.parse_args()
    if args.families:
        families(args.static_steps)
    else:
        speed(args)


if __name__ == "__main__":
    main()
