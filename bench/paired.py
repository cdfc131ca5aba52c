"""Size of the paired p-values (`metrics.paired_mean_bootstrap`, `metrics.paired_summary`) under nulls with equal
expected scores, at n = 10 … 200 questions, beside the rule they replaced, and their power against a shift.

Nulls (D datasets per cell, R = 1000 bootstrap resamples, the functions' defaults):

- lognormal: per-question differences x − y with x, y i.i.d. lognormal(0, 1) (symmetric, heavy-tailed), through
  `paired_mean_bootstrap` (as Δ EMD‾);
- skewed: d = −0.64 with probability 0.9, +5.8 with probability 0.1 (mean 0.004, all ten equal in 35% of samples
  at n = 10), through `paired_mean_bootstrap`;
- exchangeable: two methods whose predictions are i.i.d. Dirichlet(0.3) over 4 options per question (uniform
  target), through `paired_summary`: ACC, AUC, NLL, BS (NLL up to −log 10⁻⁶: heavy-tailed differences);
- near-certain: the same with predictions a real model gives many questions: θ_max = 1 − ε (ε log-uniform in
  10⁻⁵ … 10⁻³, the rest spread evenly) on an option that is the target with probability 0.9.

Power: d ~ N(0.5, 1) through `paired_mean_bootstrap`. Each cell gives the rate of p ≤ 0.05 in %, with ✓ where a
null's rate is within nominal + 2 s.e. (s.e. √(0.05 · 0.95 / D)); "before": the former rule (a sign-flip test below
30 questions, the percentile bootstrap p from 30; –: AUC's is not recomputed, it had none below 30).

    python bench/paired.py [--datasets 2000] [--seed 0] [--quick] [--nulls mean dirichlet near-certain]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import numpy as np

from beliefdrift.metrics.functional import paired_mean_bootstrap, paired_summary, resample_indices, sign_flip_p

ALPHA = 0.05
SIZES = (10, 20, 29, 30, 50, 100, 200)
FORMER_SWITCH = 30  # the former rule's PAIRED_EXACT_N
RESAMPLES = 1000


def former_p(diff: np.ndarray, seed: int = 0) -> float:
    """The former p of a mean difference: `sign_flip_p` below 30 questions, else the percentile bootstrap's
    2 (1 + #{Δ* on the far side of 0}) / (R + 1) on the resamples of `seed`."""
    if diff.size < FORMER_SWITCH:
        return sign_flip_p(diff)
    means = diff[resample_indices(diff.size, RESAMPLES, np.random.default_rng(seed))].mean(1)
    return min(1.0, 2 * (1 + min(np.count_nonzero(means <= 0), np.count_nonzero(means >= 0))) / (RESAMPLES + 1))


def lognormal(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.exp(rng.normal(size=n)) - np.exp(rng.normal(size=n))


def skewed(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.where(rng.random(n) < 0.1, 5.8, -0.64)


def shifted(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.normal(0.5, 1.0, n)


MEAN_CELLS: tuple[tuple[str, Callable[[np.random.Generator, int], np.ndarray], bool], ...] = (
    ("lognormal", lognormal, True), ("skewed", skewed, True), ("power: N(0.5, 1)", shifted, False))
METRICS = ("ACC", "AUC", "NLL", "BS")


def dirichlet(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two methods' predictions, i.i.d. Dirichlet(0.3) over 4 options, and uniform targets."""
    return rng.dirichlet(np.full(4, 0.3), n), rng.dirichlet(np.full(4, 0.3), n), rng.integers(0, 4, n)


def near_certain(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Uniform targets and two methods' predictions drawn alike given them: θ_max = 1 − ε (ε log-uniform in
    [1e-5, 1e-3], the rest spread evenly) on the target with probability 0.9, else on another option."""
    targets = rng.integers(0, 4, n)

    def predict() -> np.ndarray:
        eps = 10 ** rng.uniform(-5, -3, n)
        top = np.where(rng.random(n) < 0.9, targets, (targets + rng.integers(1, 4, n)) % 4)
        probs = np.repeat((eps / 3)[:, None], 4, axis=1)
        probs[np.arange(n), top] = 1 - eps
        return probs

    return predict(), predict(), targets


#: Exchangeable nulls (equal expected scores): their row label and (predictions a, b, targets) for n questions.
EXCHANGEABLE: dict[str, tuple[str, Callable[[np.random.Generator, int], tuple[np.ndarray, ...]]]] = {
    "dirichlet": ("exchangeable", dirichlet), "near-certain": ("near-certain", near_certain)}


def per_question(probs: np.ndarray, targets: np.ndarray, metric: str) -> np.ndarray:
    """Each question's ACC, NLL or BS (for the former rule's p)."""
    truth = np.eye(probs.shape[1])[targets]
    if metric == "ACC":
        return (probs.argmax(1) == targets).astype(np.float64)
    if metric == "NLL":
        return -np.log(np.maximum((probs * truth).sum(1), 1e-6))
    return ((probs - truth) ** 2).sum(1)


def rate(p: list[float]) -> float:
    return 100 * float(np.mean(np.asarray(p) <= ALPHA))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="n = 10 and 30 only")
    parser.add_argument("--nulls", nargs="+", choices=["mean", *EXCHANGEABLE], default=["mean", *EXCHANGEABLE])
    args = parser.parse_args()
    se = 100 * math.sqrt(ALPHA * (1 - ALPHA) / args.datasets)
    bound = 100 * ALPHA + 2 * se
    sizes = (10, 30) if args.quick else SIZES
    print(f"D = {args.datasets} datasets per cell; rate of p ≤ {ALPHA:g} in % (s.e. {se:.2f} points; ✓: ≤ "
          f"{bound:.1f}%), now / before\n")
    print("| null | " + " | ".join(f"n = {n}" for n in sizes) + " |\n|" + "---|" * (len(sizes) + 1))
    start = time.perf_counter()

    def cell(now: float, before: float, null: bool) -> str:
        return f"{now:.1f}{' ✓' if null and now <= bound else ''} / {before:.1f}"

    for name, draw, null in MEAN_CELLS if "mean" in args.nulls else ():
        cells = []
        for n in sizes:
            rng = np.random.default_rng([args.seed, n, len(name)])
            diffs = [draw(rng, n) for _ in range(args.datasets)]
            now = [paired_mean_bootstrap(d, np.zeros(n), seed=i).p for i, d in enumerate(diffs)]
            cells.append(cell(rate(now), rate([former_p(d, i) for i, d in enumerate(diffs)]), null))
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    for key in [key for key in EXCHANGEABLE if key in args.nulls]:
        label, draw = EXCHANGEABLE[key]
        rows: dict[str, list[str]] = {metric: [] for metric in METRICS}
        for n in sizes:
            rng = np.random.default_rng([args.seed, n] if key == "dirichlet" else [args.seed, n, len(key)])
            now: dict[str, list[float]] = {metric: [] for metric in METRICS}
            before: dict[str, list[float]] = {metric: [] for metric in METRICS}
            for i in range(args.datasets):
                a, b, targets = draw(rng, n)
                deltas = paired_summary(a, b, targets, seed=i)
                for metric in METRICS:
                    now[metric].append(deltas[metric].p)
                for metric in ("ACC", "NLL", "BS"):
                    before[metric].append(former_p(per_question(a, targets, metric) - per_question(b, targets, metric),
                                                   i))
            for metric in METRICS:
                shown = f"{rate(before[metric]):.1f}" if before[metric] else "–"  # AUC's former p is not recomputed
                rows[metric].append(f"{rate(now[metric]):.1f}{' ✓' if rate(now[metric]) <= bound else ''} / {shown}")
        for metric in METRICS:
            print(f"| {label}, {metric} | " + " | ".join(rows[metric]) + " |", flush=True)
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
