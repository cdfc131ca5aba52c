"""The engine's decode step under `torch.compile` vs eager, in one run (no flag ships until this pays on a GPU).

    python bench/compile.py [--shape tiny] [--device cpu] [--paths 8] [--steps 20]
    python bench/compile.py --shape llama-3.1-8b --device cuda --paths 32 --steps 100

Runs PPR, SEED_1 and SEED_5 (J paths each) on one demo question with random weights of `--shape`
(`bench/rollout.py`'s shapes), first eager, then with `model.forward = torch.compile(model.forward,
dynamic=True)`: compile time (the first compiled run), ms/step of each (runs of 2N and N answers differenced, best
of 3), how many answers agree and the largest θ difference while a path's answers agree (compiled kernels round
differently). A failure to compile is reported with its first line.
"""

from __future__ import annotations

import argparse
import time

import torch
from rollout import SHAPES, shaped_model, three_methods, timed

from beliefdrift.backend.loading import resolve_device, resolve_dtype
from beliefdrift.data.registry import load_dataset
from beliefdrift.errors import first_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--paths", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    device = resolve_device(args.device)
    torch.manual_seed(0)
    lm = shaped_model(args.shape, device, resolve_dtype(args.dtype, device))
    question = load_dataset("demo", n=1, seed=0)[0]

    def paths(steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Answers [3J, N] and θ [3J, N+1, K] of every path."""
        results = three_methods(lm, [question], args.paths, steps)[0]
        return (torch.cat([r.trajectories.answers for r in results]),
                torch.cat([r.trajectories.thetas.float() for r in results]))

    def ms_per_step() -> float:
        best = [min(timed(device, lambda n=n: paths(n)) for _ in range(3)) for n in (2 * args.steps, args.steps)]
        return (best[0] - best[1]) / args.steps * 1e3

    eager_answers, eager_thetas = paths(args.steps)
    eager = ms_per_step()
    print(f"{args.shape} on {device}, 3 methods × {args.paths} paths: eager {eager:.1f} ms/step")
    lm.model.forward = torch.compile(lm.model.forward, dynamic=True)
    start = time.perf_counter()
    try:
        answers, thetas = paths(args.steps)
    except Exception as err:  # the finding is the failure itself
        print(f"torch.compile failed after {time.perf_counter() - start:.0f} s: {type(err).__name__}: "
              f"{first_line(err)}")
        return
    print(f"first compiled run (compiles) {time.perf_counter() - start:.0f} s")
    compiled = ms_per_step()
    # θ is comparable while a path's answers so far agree (a rounding difference can flip a later draw).
    agree = torch.cat([torch.ones_like(answers[:, :1]), (answers == eager_answers).long().cumprod(1)], 1).bool()
    print(f"compiled {compiled:.1f} ms/step ({eager / compiled:.2f}x eager); answers equal "
          f"{(answers == eager_answers).float().mean():.1%}; largest θ difference while they agree "
          f"{(thetas - eager_thetas).abs().amax(-1)[agree].max():.2e}")


if __name__ == "__main__":
    main()
