"""`--cuda-graphs` (static steps, one step of each batch recorded as a CUDA graph and replayed) against the eager
engine and against the same static steps run uncaptured, in one run, on random weights of a real shape.

    python bench/cuda_graphs.py --shape llama-3.1-8b --device cuda --dtype bfloat16 --steps 100 --tokenizer DIR
    python bench/cuda_graphs.py --shape tiny --device cpu --steps 5   # the script itself, on a CPU (no capture)

For 1 and 16 questions × 3 methods (PPR, SEED_1, SEED_5) × `--paths` paths, N = `--steps` answers: ms per step
(the run's prefills included, as `bench/rollout.py` counts them), × the weight-read floor, path-answers/s and the
share of the bf16 roofline of each engine; the share of paths whose answers equal those of eager (and of the
uncaptured static steps) and the largest θ difference on those paths; the time of the warm-up and capture of one
batch (`engine.resampling.run_static_steps`, timed on the first batch of another 16-question run). Naive `generate`
at one question gives the ratio to naive decoding.
"""

from __future__ import annotations

import argparse
import time

import torch
from rollout import (
    SHAPES,
    TOKENIZER_HELP,
    copy_bandwidth,
    device_matmul_peak,
    forward_flops,
    naive_rollout,
    shaped_model,
    three_methods,
    timed,
)

from beliefdrift.backend import EngineSettings, StepMode
from beliefdrift.backend.loading import resolve_device, resolve_dtype
from beliefdrift.data.registry import load_dataset
from beliefdrift.engine import resampling
from beliefdrift.engine.resampling import ppr_tokens
from beliefdrift.prompts import DEFAULT_PPR_TEMPLATE

ENGINES = {"eager": (False, False), "static steps": (True, False), "cuda graphs": (True, True)}


def outputs(results: list) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every method's (answers, θ) of every question."""
    return [(r.trajectories.answers.cpu(), r.trajectories.thetas.float().cpu()) for rows in results for r in rows]


def agreement(reference: list[tuple[torch.Tensor, torch.Tensor]], other: list[tuple[torch.Tensor, torch.Tensor]]
              ) -> str:
    """The share of paths whose answers are the same, and the largest θ difference on those paths."""
    same = [(a == b).all(-1) for (a, _), (b, _) in zip(reference, other, strict=True)]
    gaps = [(t - u).abs().amax((-1, -2))[s] for (_, t), (_, u), s in zip(reference, other, same, strict=True)]
    gap, equal = torch.cat(gaps), float(torch.cat(same).float().mean())
    return f"{equal:.0%} of paths equal, θ within {float(gap.max()) if len(gap) else 0:.1e}"


def capture_seconds(lm, questions: list, paths: int, steps: int) -> tuple[float, int]:
    """(seconds spent in `run_static_steps` before the first replay, the paths of that batch): the warm-up steps and
    the recording of the run's first batch (questions with another number of options go in batches of their own)."""
    spent: list[tuple[float, int]] = []
    original = resampling.run_static_steps
    replay = torch.cuda.CUDAGraph.replay

    def timed_run(bucket, count, capture=False):
        start = time.perf_counter()

        def first(graph):
            if not spent:
                torch.cuda.synchronize()
                spent.append((time.perf_counter() - start, bucket.answers.shape[0]))
            return replay(graph)

        torch.cuda.CUDAGraph.replay = first
        try:
            return original(bucket, count, capture)
        finally:
            torch.cuda.CUDAGraph.replay = replay

    resampling.run_static_steps = timed_run
    try:
        three_methods(lm, questions, paths, steps)
    finally:
        resampling.run_static_steps = original
    return spent[0] if spent else (float("nan"), 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.1-8b")
    parser.add_argument("--tokenizer", help=TOKENIZER_HELP)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--paths", type=int, default=32)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--questions", type=int, nargs="+", default=[1, 16])
    args = parser.parse_args()
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    lm = shaped_model(args.shape, device, dtype, args.tokenizer)
    weights = sum(p.numel() * p.element_size() for p in lm.model.parameters())
    floor = weights / copy_bandwidth(device)
    peak = device_matmul_peak(device, dtype)
    questions = load_dataset("demo", n=max(args.questions) * 2, seed=0)
    tokens = ppr_tokens(lm, questions[0], DEFAULT_PPR_TEMPLATE)
    flops = forward_flops(lm.model, tokens.step_length, len(tokens.prompt_ids) + args.steps, 1)
    print(f"{args.shape} on {device} ({dtype}): weight-read floor {floor * 1e3:.2f} ms/step, matmul peak "
          f"{peak / 1e12:.3g} TFLOP/s, prompt {len(tokens.prompt_ids)} tokens, {args.paths} paths × 3 methods, "
          f"N={args.steps}", flush=True)
    naive = 3 * args.paths * args.steps / timed(device, lambda: naive_rollout(lm, questions[0], 3 * args.paths,
                                                                               args.steps, 0))
    print(f"naive generate, one question: {naive:,.0f} path-answers/s\n", flush=True)
    print("| questions | engine | ms/step | × floor | path-answers/s | × naive | of roofline | vs eager | vs static |\n"
          "|---|---|---|---|---|---|---|---|---|", flush=True)
    engines = ENGINES if device.type == "cuda" else {k: v for k, v in ENGINES.items() if not v[1]}
    for count in args.questions:
        batch = questions[:count]
        reference = static_steps = None
        for name, (static, capture) in engines.items():
            lm.engine = EngineSettings(answer_step=StepMode(static, capture))
            three_methods(lm, batch, args.paths, args.steps)  # warm: kernels chosen, caches allocated
            results: list = []
            seconds = timed(device, lambda b=batch, r=results: r.extend(three_methods(lm, b, args.paths, args.steps)))
            got = outputs(results)
            reference = reference if reference is not None else got
            static_steps = got if static and not capture else static_steps
            rate = count * 3 * args.paths * args.steps / seconds
            print(f"| {count} | {name} | {seconds / args.steps * 1e3:.1f} | {seconds / args.steps / floor:.1f} | "
                  f"{rate:,.0f} | {rate / naive:.1f} | {rate * flops / peak:.1%} | {agreement(reference, got)} | "
                  f"{agreement(static_steps, got) if static_steps is not None else '–'} |",
                  flush=True)
    if device.type == "cuda":
        lm.engine = EngineSettings(answer_step=StepMode(static=True, capture=True))
        count = max(args.questions)
        seconds, batch = capture_seconds(lm, questions[count : 2 * count], args.paths, args.steps)
        print(f"\nwarm-up ({resampling.CAPTURE_WARM_UP} steps) and capture of the first batch of a {count}-question "
              f"run ({batch} paths): {seconds * 1e3:.0f} ms", flush=True)


if __name__ == "__main__":
    main()
