"""Answer draws per engine step: block by block (a `torch.multinomial` per method and question, seeded from its own
generator) against up front (each block's uniforms for all steps drawn on the host once, then one inverse-CDF lookup
per step for the whole batch), in one run on one device. The model's forward pass is left out: this is the time a
step spends drawing, which on a GPU is host time (kernel launches) added to every step, graphed or not.

    python bench/draws.py [--device cpu] [--paths 32] [--steps 100] [--questions 1 4 16]
    python bench/draws.py --device cuda
"""

from __future__ import annotations

import argparse
import time

import torch

from beliefdrift.backend.loading import resolve_device
from beliefdrift.engine.resampling import blockwise_draws, make_generator, up_front_draws

METHODS = 3  # PPR, SEED_1, SEED_5: one block of paths each per question


def per_step(device: torch.device, probs: torch.Tensor, paths: int, steps: int, draws) -> float:
    """Seconds per step of drawing `steps` answers for every path of `probs` [B, K] in blocks of `paths`, each block
    from its own generator, with `draws(streams, steps)` made anew (its set-up included), after a warm-up run."""

    def run(count: int) -> None:
        draw = draws([(paths, make_generator(0, block)) for block in range(len(probs) // paths)], count)
        for step in range(count):
            draw(probs, step)

    run(2)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    run(steps)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--paths", type=int, default=32)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--questions", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--labels", type=int, default=5)
    args = parser.parse_args()
    device = resolve_device(args.device)
    print(f"device {device}, {METHODS} methods × {args.paths} paths per question, {args.labels} labels, "
          f"{args.steps} steps, {torch.get_num_threads()} threads")
    print("| questions | blocks | block by block µs/step | up front µs/step | ratio |")
    print("|---|---|---|---|---|")
    for questions in args.questions:
        blocks = METHODS * questions
        probs = torch.softmax(torch.randn(blocks * args.paths, args.labels, device=device), -1)
        blockwise = per_step(device, probs, args.paths, args.steps, lambda streams, _: blockwise_draws(streams))
        up_front = per_step(device, probs, args.paths, args.steps,
                            lambda streams, steps: up_front_draws(streams, steps, device))
        print(f"| {questions} | {blocks} | {blockwise * 1e6:,.0f} | {up_front * 1e6:,.0f} | "
              f"{blockwise / up_front:.1f}× |")


if __name__ == "__main__":
    main()
