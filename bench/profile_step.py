"""Where a batched engine step's time goes: matrix products, attention, other kernels, and the host.

    python bench/profile_step.py --shape llama-3.1-8b --device cuda --dtype bfloat16 [--questions 1 16]
    python bench/profile_step.py --shape tiny --steps 4            # the same on a CPU (operators, not kernels)
    python bench/profile_step.py --shape llama-3.1-8b-narrow --as-gpu --paths 8 --steps 2   # a GPU's operator events

Runs PPR, SEED_1 and SEED_5 (`--paths` paths each) on 1 and 16 demo questions (`bench/rollout.py`'s shapes, random
weights), timed without the profiler, then once under `torch.profiler`. On a GPU the profile's kernels are put into
three groups by name (matrix products: gemm/cutlass/nvjet kernels; attention: flash/fmha/softmax kernels; other), and
the host's share of a step is the timed wall time less the kernels' time (what the GPU spends idle, waiting for
launches). On a CPU the aten operators' own times are grouped the same way. The profile's largest items at the last
question count follow the table (attention's batched products count as matrix products; a fused attention kernel is
attention even where its name also names cutlass; the answers' log-softmax over the vocabulary is other). Prefills are
included: at N steps they are amortized as in a run.

The profile is read from the profiler's raw events (`own_times`; the same numbers as `key_averages`), not through
`key_averages`, which builds a Python object and a tree for every event (100–180 µs an event on a busy 2-core CPU).
Most of a 16-question profile's events are not its answer steps: each question's prefills and seed passes run
question by question (docs/gpu.md, "Where the time goes").
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from rollout import SHAPES, TOKENIZER_HELP, gpu_layout, shaped_model, three_methods, timed
from torch.autograd import DeviceType
from torch.autograd.profiler_util import _filter_name, _rewrite_name
from torch.profiler import ProfilerActivity, profile

from beliefdrift.backend.loading import resolve_device, resolve_dtype
from beliefdrift.data.registry import load_dataset

# In this order: the answers' log-softmax over the vocabulary is no attention; fused attention kernels also name
# cutlass (PyTorch's memory-efficient `fmha_cutlassF_…`, flash kernels' `cutlass::` template arguments).
GROUPS = (
    ("other", re.compile(r"log_?softmax", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|softmax|aten::_efficient", re.I)),
    ("matrix products", re.compile(r"gemm|cutlass|xmma|nvjet|sm90|aten::(mm|addmm|bmm|matmul|linear)$", re.I)),
)
COLUMNS = ("matrix products", "attention", "other")


def group(name: str) -> str:
    return next((label for label, pattern in GROUPS if pattern.search(name)), "other")


@dataclass
class Own:
    """One name's calls and own seconds in a profile."""

    calls: int = 0
    seconds: float = 0.0


def own_times(events: Iterable, device: torch.device) -> dict[str, Own]:
    """Calls and own seconds per kernel (GPU: each kernel's or copy's duration) or per operator (CPU: its duration
    less that of the operators it calls on its thread), from the profiler's raw events, named and filtered as
    `key_averages` names them (its `self_device_time_total`, `self_cpu_time_total`)."""
    names: dict[str, str] = {}
    times: dict[str, Own] = {}
    threads: dict[int, list[tuple[int, int, str]]] = {}
    for event in events:
        raw = event.name()
        if _filter_name(raw) or getattr(event, "is_hidden_event", lambda: False)():
            continue
        if event.is_async() or event.start_thread_id() != event.end_thread_id():
            continue
        name = names.get(raw) or names.setdefault(raw, _rewrite_name(raw, with_wildcard=True))
        on_device = event.device_type() != DeviceType.CPU
        if device.type == "cuda" and on_device:
            own = times.setdefault(name, Own())
            own.calls += 1
            own.seconds += (event.end_ns() - event.start_ns()) / 1e9
        elif device.type != "cuda" and not on_device:
            threads.setdefault(event.start_thread_id(), []).append((event.start_ns(), event.end_ns(), name))
    for spans in threads.values():  # nesting: each operator's time less its direct callees' (torch's own rule)
        spans.sort(key=lambda span: (span[0], -span[1]))
        stack: list[list] = []  # [end, own ns, name] of the open callers, innermost last
        for start, end, name in spans:
            while stack and (start >= stack[-1][0] or end > stack[-1][0]):
                _close(stack.pop(), times)
            if stack:
                stack[-1][1] -= end - start
            stack.append([end, end - start, name])
        while stack:
            _close(stack.pop(), times)
    return times


def _close(span: list, times: dict[str, Own]) -> None:
    own = times.setdefault(span[2], Own())
    own.calls += 1
    own.seconds += span[1] / 1e9


def key_averages_gap(prof: profile, times: dict[str, Own], device: torch.device) -> tuple[float, float]:
    """(seconds `key_averages` takes to read the profile, the largest difference of a name's own seconds between
    it and `own_times`)."""
    start = time.perf_counter()
    averages = prof.key_averages()
    spent = time.perf_counter() - start
    if device.type == "cuda":
        theirs = {e.key: e.self_device_time_total / 1e6 for e in averages if e.device_type == DeviceType.CUDA}
    else:
        theirs = {e.key: e.self_cpu_time_total / 1e6 for e in averages}
    ours = {name: own.seconds for name, own in times.items()}
    return spent, max(abs(ours.get(name, 0.0) - theirs.get(name, 0.0)) for name in {*ours, *theirs})


def grouped(times: dict[str, Own]) -> dict[str, float]:
    """Own seconds per group (`GROUPS`, else other)."""
    totals = dict.fromkeys(COLUMNS, 0.0)
    for name, own in times.items():
        totals[group(name)] += own.seconds
    return totals


def largest(times: dict[str, Own], rows: int = 15, width: int = 70) -> str:
    """The `rows` names with the most own time, as a markdown table."""
    total = sum(own.seconds for own in times.values()) or 1.0
    top = sorted(times.items(), key=lambda item: -item[1].seconds)[:rows]
    lines = ["| name | group | calls | own ms | share |", "|---|---|---|---|---|"]
    lines += [f"| {name[:width]} | {group(name)} | {own.calls:,} | {own.seconds * 1e3:.1f} | "
              f"{own.seconds / total:.1%} |" for name, own in top]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--tokenizer", help=TOKENIZER_HELP)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--paths", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--questions", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--as-gpu", action="store_true", help="on a CPU: the engine as a GPU runs it (prompts "
                        "stacked, answers drawn up front), so the profile holds the operators a GPU's host records")
    parser.add_argument("--check", action="store_true", help="also read each profile through torch's key_averages "
                        "(slow): its time, and the largest difference from ours")
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    lm = shaped_model(args.shape, device, resolve_dtype(args.dtype, device), args.tokenizer)
    questions = load_dataset("demo", n=max(args.questions), seed=0)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    unit = "kernels" if device.type == "cuda" else "operators' own CPU time"
    print(f"{args.shape} on {device}, {args.dtype}, 3 methods × {args.paths} paths, N={args.steps} (prefills "
          f"included); ms per step\n\n| questions | wall | matrix products | attention | other {unit} | host "
          "(wall − kernels) |\n|---|---|---|---|---|---|")
    reads = []
    with gpu_layout() if args.as_gpu else nullcontext():
        for count in args.questions:
            batch = questions[:count]
            three_methods(lm, batch, args.paths, 2)  # warm-up: allocator, kernel choices
            wall = timed(device, lambda b=batch: three_methods(lm, b, args.paths, args.steps))
            with profile(activities=activities) as prof:
                timed(device, lambda b=batch: three_methods(lm, b, args.paths, args.steps))
            start = time.perf_counter()
            events = prof.profiler.kineto_results.events()
            times = own_times(events, device)
            reads.append(f"{count} question{'s' * (count > 1)}: {len(events):,} events read in "
                         f"{time.perf_counter() - start:.1f} s")
            if args.check:
                spent, gap = key_averages_gap(prof, times, device)
                reads[-1] += f" (key_averages: {spent:.1f} s, own times within {gap:.1e} s of its)"
            parts = grouped(times)
            busy = sum(parts.values())
            host = f"{(wall - busy) / args.steps * 1e3:.1f}" if device.type == "cuda" else "–"
            cells = " | ".join(f"{parts[label] / args.steps * 1e3:.1f}" for label in COLUMNS)
            print(f"| {count} | {wall / args.steps * 1e3:.1f} | {cells} | {host} |", flush=True)
    print(f"\nProfiles: {'; '.join(reads)}.")
    print(f"\nThe largest items at {args.questions[-1]} questions (own time of the whole profiled run):\n")
    print(largest(times))


if __name__ == "__main__":
    main()
