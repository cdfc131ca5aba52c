"""Coverage of the calibration-error intervals: the paper's binned ECE (percentile bootstrap, `bootstrap_ci`) and
the debiased CE₂ (`metrics.ce2_interval`, bias-centred percentile bootstrap), over simulated datasets of n questions.

A question's confidence c ~ 0.25 + 0.75 · Beta(2, 2) (4 options: p = [c, (1 − c)/3, …]) and it is answered correctly
with probability g(c): calibrated g(c) = c; over g(c) = c − 0.1 (true ECE ≈ 0.1, as in issue 27); flat
g(c) = 0.4 + 0.4 c. The truths are the population binned quantities, Σ_b P_b |E[g(c) − c | b]| (15 bins) and
√Σ_b P_b E[g(c) − c | b]² (10 bins), from 2 · 10⁶ draws of c. Prints, per setting and n, each truth, each estimator's
mean, and the share of D datasets whose 95% interval holds the truth.

    python bench/calibration.py [--datasets 400] [--resamples 400] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import numpy as np

from beliefdrift.metrics.functional import (
    CE2_BINS,
    _bin_index,
    _normalise,
    bootstrap_ci,
    ce2_interval,
    ece,
    resample_indices,
)

SETTINGS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "calibrated": lambda c: c,
    "over": lambda c: np.clip(c - 0.1, 0.0, 1.0),
    "flat": lambda c: 0.4 + 0.4 * c,
}
SIZES = (10, 20, 30, 50, 100, 200)


def confidences(n: int, rng: np.random.Generator) -> np.ndarray:
    return 0.25 + 0.75 * rng.beta(2.0, 2.0, size=n)


def truths(accuracy: Callable[[np.ndarray], np.ndarray], rng: np.random.Generator) -> tuple[float, float]:
    """Population binned ECE (15 bins) and CE₂ (`CE2_BINS` bins)."""
    c = confidences(2_000_000, rng)
    gap = accuracy(c) - c
    out = []
    for bins, power in ((15, 1), (CE2_BINS, 2)):
        index, _ = _bin_index(c, bins)
        mass = np.bincount(index, minlength=bins) / len(c)
        mean_gap = np.divide(np.bincount(index, gap, minlength=bins), np.bincount(index, minlength=bins) * 1.0,
                             out=np.zeros(bins), where=mass > 0)
        out.append(float(np.sum(mass * np.abs(mean_gap) ** power) ** (1 / power)))
    return out[0], out[1]


def dataset(n: int, accuracy: Callable[[np.ndarray], np.ndarray], rng: np.random.Generator):
    c = confidences(n, rng)
    probs = np.column_stack([c, *([(1 - c) / 3] * 3)])
    return probs, np.where(rng.random(n) < accuracy(c), 0, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", type=int, default=400)
    parser.add_argument("--resamples", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    se = 100 * math.sqrt(0.95 * 0.05 / args.datasets)
    print(f"D = {args.datasets} datasets, R = {args.resamples} resamples, 95% intervals (Monte Carlo s.e. of a 95% "
          f"coverage: {se:.1f} points)\n")
    header = ["setting", "n", "ECE truth", "ECE mean", "ECE covers %", "CE₂ truth", "CE₂ mean", "CE₂ covers %"]
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for name, accuracy in SETTINGS.items():
        ece_truth, ce2_truth = truths(accuracy, rng)
        for n in SIZES:
            ece_hits, ce2_hits, ece_sum, ce2_sum = 0, 0, 0.0, 0.0
            for _ in range(args.datasets):
                probs, targets = dataset(n, accuracy, rng)
                seed = int(rng.integers(2**31))
                interval = bootstrap_ci(ece, probs, targets, n_resamples=args.resamples, seed=seed)
                ece_hits += interval.low <= ece_truth <= interval.high
                ece_sum += interval.point
                index = resample_indices(n, args.resamples, np.random.default_rng(seed))
                calibration = ce2_interval(_normalise(probs, targets), index, 0.95, min_n=0)
                ce2_hits += calibration.low <= ce2_truth <= calibration.high
                ce2_sum += calibration.point
            d = args.datasets
            print(f"| {name} | {n} | {ece_truth:.4f} | {ece_sum / d:.4f} | {100 * ece_hits / d:.1f} | "
                  f"{ce2_truth:.4f} | {ce2_sum / d:.4f} | {100 * ce2_hits / d:.1f} |", flush=True)


if __name__ == "__main__":
    main()
