"""Where a batched engine step's time goes: matrix products, attention, other kernels, and the host.

    python bench/profile_step.py --shape llama-3.1-8b --device cuda --dtype bfloat16 [--questions 1 16]
    python bench/profile_step.py --shape tiny --steps 4            # the same on a CPU (operators, not kernels)

Runs PPR, SEED_1 and SEED_5 (`--paths` paths each) on 1 and 16 demo questions (`bench/rollout.py`'s shapes, random
weights), timed without the profiler, then once under `torch.profiler`. On a GPU the profile's kernels are put into
three groups by name (matrix products: gemm/cutlass/nvjet kernels; attention: flash/fmha/softmax kernels; other), and
the host's share of a step is the timed wall time less the kernels' time (what the GPU spends idle, waiting for
launches). On a CPU the aten operators' own times are grouped the same way. The profile's largest items at the last
question count follow the table (attention's batched products count as matrix products). Prefills are included: at
N steps they are amortized as in a run.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict

import torch
from rollout import SHAPES, TOKENIZER_HELP, shaped_model, three_methods, timed
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from beliefdrift.backend.loading import resolve_device, resolve_dtype
from beliefdrift.data.registry import load_dataset

GROUPS = (
    ("matrix products", re.compile(r"gemm|cutlass|xmma|nvjet|sm90|aten::(mm|addmm|bmm|matmul|linear)$", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|softmax|aten::_efficient", re.I)),
)


def group(name: str) -> str:
    return next((label for label, pattern in GROUPS if pattern.search(name)), "other")


def profiled_seconds(prof: profile, device: torch.device) -> dict[str, float]:
    """Seconds of kernel time (GPU) or of operators' own time (CPU) per group."""
    totals: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        if device.type == "cuda":
            if event.device_type != DeviceType.CUDA:
                continue
            seconds = event.self_device_time_total / 1e6
        else:
            seconds = event.self_cpu_time_total / 1e6
        totals[group(event.key)] += seconds
    return dict(totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--tokenizer", help=TOKENIZER_HELP)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--paths", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--questions", type=int, nargs="+", default=[1, 16])
    args = parser.parse_args()
    device = resolve_device(args.device)
    lm = shaped_model(args.shape, device, resolve_dtype(args.dtype, device), args.tokenizer)
    questions = load_dataset("demo", n=max(args.questions), seed=0)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    unit = "kernels" if device.type == "cuda" else "operators' own CPU time"
    print(f"{args.shape} on {device}, {args.dtype}, 3 methods × {args.paths} paths, N={args.steps} (prefills "
          f"included); ms per step\n\n| questions | wall | matrix products | attention | other {unit} | host "
          "(wall − kernels) |\n|---|---|---|---|---|---|")
    for count in args.questions:
        batch = questions[:count]
        three_methods(lm, batch, args.paths, 2)  # warm-up: allocator, kernel choices
        wall = timed(device, lambda b=batch: three_methods(lm, b, args.paths, args.steps))
        with profile(activities=activities) as prof:
            timed(device, lambda b=batch: three_methods(lm, b, args.paths, args.steps))
        parts = profiled_seconds(prof, device)
        busy = sum(parts.values())
        host = f"{(wall - busy) / args.steps * 1e3:.1f}" if device.type == "cuda" else "–"
        cells = " | ".join(f"{parts.get(label, 0.0) / args.steps * 1e3:.1f}"
                           for label in ("matrix products", "attention", "other"))
        print(f"| {count} | {wall / args.steps * 1e3:.1f} | {cells} | {host} |", flush=True)
    sort = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(f"\nThe largest items at {args.questions[-1]} questions:")
    print(prof.key_averages().table(sort_by=sort, row_limit=15, max_name_column_width=70))


if __name__ == "__main__":
    main()
