"""Size and power of the paired p-values (`metrics.paired_mean_bootstrap`, `metrics.paired_summary`) at n = 5 … 200
questions, beside the rule they replaced and a t-test.

Equal-mean nulls of NLL differences (bound −log 10⁻⁶ = 13.8, through `paired_mean_bootstrap` with that bound, as
`paired_summary` tests NLL):

- two-point: d = −0.64 w.p. 0.9, +5.76 w.p. 0.1 (mean 0; all of 10 equal in 35% of samples), each × (1 + 0.01 ε),
  ε ~ N(0, 1), so no two are equal;
- rare: d = −0.2 w.p. 0.98, +9.8 w.p. 0.02, with the same jitter;
- lognormal: min(e^{1.5 Z}, 13.8) minus its exact mean (a centred lognormal σ = 1.5, clipped to the bound);
- near-certain vs hedging (NLL through `paired_summary`): right with θ = 0.95 on 90% of questions and θ ≈ 0.0015 on
  the rest (4 options), against θ ≈ e^{−0.6964} ≈ 0.498 on the target everywhere: equal expected NLL.

Exchangeable nulls through `paired_summary` (ACC, AUC, NLL, BS): i.i.d. Dirichlet(0.3) predictions over 4 options
(uniform target); and near-certain ones, θ_max = 1 − ε (ε log-uniform in 10⁻⁵ … 10⁻³, the rest spread evenly) on an
option that is the target with probability 0.9.

Power: d ~ N(0.5, 1) within the NLL bound, and d ~ N(0.1, 0.3) within the Brier bound 2.

Each cell: the rate of p ≤ 0.05 in %, now / the former rule (the larger of `sign_flip_p` and `studentized_p`, R =
1000) / a two-sided one-sample t-test; ✓ where a null's rate (now) is within nominal + 2 s.e. (s.e. √(0.05 · 0.95 /
D)). For the exchangeable nulls: now / former (NLL, BS; ACC and AUC are unchanged).

    python bench/paired.py [--datasets 2000] [--seed 0] [--quick] [--rows bounded exchangeable power]
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from collections.abc import Callable

import numpy as np
from scipy import stats

from beliefdrift.metrics.functional import (
    BRIER_BOUND,
    nll_bound,
    paired_mean_bootstrap,
    paired_summary,
    resample_indices,
    sign_flip_p,
    studentized_p,
)

ALPHA = 0.05
SIZES = (5, 10, 20, 30, 50, 100, 200)
RESAMPLES = 1000
NLL_BOUND = nll_bound()
Draw = Callable[[np.random.Generator, int], np.ndarray]


def former_p(diff: np.ndarray, seed: int) -> float:
    """The rule the betting test replaced: max(`sign_flip_p`, `studentized_p` on R = 1000 resamples of `seed`)."""
    return max(sign_flip_p(diff), studentized_p(diff, resample_indices(diff.size, RESAMPLES,
                                                                       np.random.default_rng(seed))))


def t_test_p(diff: np.ndarray) -> float:
    """Two-sided one-sample t-test of mean 0 (1 where the sample has no spread)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        p = stats.ttest_1samp(diff, 0.0).pvalue
    return 1.0 if math.isnan(p) else float(p)


def jittered(low: float, chance: float) -> Draw:
    """d = −low w.p. 1 − chance, else low (1 − chance)/chance (mean 0), each × (1 + 0.01 ε), ε ~ N(0, 1)."""
    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        values = np.where(rng.random(n) < chance, low * (1 - chance) / chance, -low)
        return values * (1 + 0.01 * rng.standard_normal(n))
    return draw


def clipped_lognormal(rng: np.random.Generator, n: int, sigma: float = 1.5, cap: float = NLL_BOUND) -> np.ndarray:
    """min(e^{σZ}, cap) minus its mean e^{σ²/2} Φ((log cap − σ²)/σ) + cap (1 − Φ(log cap / σ))."""
    mean = (math.exp(sigma**2 / 2) * stats.norm.cdf((math.log(cap) - sigma**2) / sigma)
            + cap * stats.norm.sf(math.log(cap) / sigma))
    return np.minimum(np.exp(sigma * rng.standard_normal(n)), cap) - mean


def shifted(mean: float, spread: float, bound: float) -> Draw:
    return lambda rng, n: np.clip(rng.normal(mean, spread, n), -bound, bound)


#: The bounded equal-mean nulls of NLL differences (tests/test_paired.py draws them too).
MEAN_NULLS: dict[str, Draw] = {"two-point": jittered(0.64, 0.1), "rare": jittered(0.2, 0.02),
                               "lognormal": clipped_lognormal}
#: (row label, draw, bound, is a null) of every row through `paired_mean_bootstrap`.
MEAN_ROWS: dict[str, tuple[tuple[str, Draw, float, bool], ...]] = {
    "bounded": (("two-point + 1% jitter (NLL)", MEAN_NULLS["two-point"], NLL_BOUND, True),
                ("rare value w.p. 0.02 (NLL)", MEAN_NULLS["rare"], NLL_BOUND, True),
                ("lognormal σ = 1.5, clipped (NLL)", MEAN_NULLS["lognormal"], NLL_BOUND, True)),
    "power": (("power: N(0.5, 1), NLL bound", shifted(0.5, 1.0, NLL_BOUND), NLL_BOUND, False),
              ("power: N(0.1, 0.3), Brier bound", shifted(0.1, 0.3, BRIER_BOUND), BRIER_BOUND, False)),
}
NEAR_CERTAIN_RIGHT, NEAR_CERTAIN_WRONG, NEAR_CERTAIN_HIT = 0.95, 0.0015, 0.9


def near_certain_hedging(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a, b, targets) over 4 options, target 0: a puts 0.95 on it w.p. 0.9, else 0.0015 e^{0.1 ε} (the rest on
    option 1); b puts e^{−E[NLL of a]} e^{0.01 ε'} on it (the rest evenly), ε, ε' ~ N(0, 1): the same expected NLL,
    and no two questions alike."""
    hit = rng.random(n) < NEAR_CERTAIN_HIT
    wrong = NEAR_CERTAIN_WRONG * np.exp(0.1 * rng.standard_normal(n))
    a = np.zeros((n, 4))
    a[:, 0] = np.where(hit, NEAR_CERTAIN_RIGHT, wrong)
    a[:, 1] = np.where(hit, (1 - NEAR_CERTAIN_RIGHT) / 3, 1 - wrong)
    a[:, 2:] = np.where(hit, (1 - NEAR_CERTAIN_RIGHT) / 3, 0.0)[:, None]
    expected = NEAR_CERTAIN_HIT * math.log(NEAR_CERTAIN_RIGHT) + (1 - NEAR_CERTAIN_HIT) * math.log(NEAR_CERTAIN_WRONG)
    hedge = math.exp(expected) * np.exp(0.01 * rng.standard_normal(n))
    b = np.column_stack([hedge, *[(1 - hedge) / 3] * 3])
    return a, b, np.zeros(n, dtype=np.int64)


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


#: Nulls through `paired_summary`: their row label, the metrics shown, (predictions a, b, targets) for n questions.
SUMMARY_NULLS = (("near-certain vs hedging", ("NLL",), near_certain_hedging),
                 ("exchangeable", ("ACC", "AUC", "NLL", "BS"), dirichlet),
                 ("near-certain", ("ACC", "AUC", "NLL", "BS"), near_certain))


def per_question(probs: np.ndarray, targets: np.ndarray, metric: str) -> np.ndarray:
    """Each question's NLL or BS (for the former rule's p)."""
    truth = np.eye(probs.shape[1])[targets]
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
    parser.add_argument("--rows", nargs="+", choices=["bounded", "power", "summary"],
                        default=["bounded", "power", "summary"])
    args = parser.parse_args()
    se = 100 * math.sqrt(ALPHA * (1 - ALPHA) / args.datasets)
    bound = 100 * ALPHA + 2 * se
    sizes = (10, 30) if args.quick else SIZES
    print(f"D = {args.datasets} datasets per cell; rate of p ≤ {ALPHA:g} in % (s.e. {se:.2f} points; ✓: ≤ "
          f"{bound:.1f}%), now / before / t-test (summary rows: now / before)\n")
    print("| row | " + " | ".join(f"n = {n}" for n in sizes) + " |\n|" + "---|" * (len(sizes) + 1))
    start = time.perf_counter()
    for key in [key for key in MEAN_ROWS if key in args.rows]:
        for label, draw, limit, null in MEAN_ROWS[key]:
            cells = []
            for n in sizes:
                rng = np.random.default_rng([args.seed, n, len(label)])
                diffs = [draw(rng, n) for _ in range(args.datasets)]
                now = rate([paired_mean_bootstrap(d, np.zeros(n), bound=limit, n_resamples=1).p for d in diffs])
                before = rate([former_p(d, i) for i, d in enumerate(diffs)])
                cells.append(f"{now:.1f}{' ✓' if null and now <= bound else ''} / {before:.1f} / "
                             f"{rate([t_test_p(d) for d in diffs]):.1f}")
            print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    for label, metrics, draw in SUMMARY_NULLS if "summary" in args.rows else ():
        rows: dict[str, list[str]] = {metric: [] for metric in metrics}
        for n in sizes:
            rng = np.random.default_rng([args.seed, n, len(label)])
            now: dict[str, list[float]] = {metric: [] for metric in metrics}
            before: dict[str, list[float]] = {metric: [] for metric in metrics}
            for i in range(args.datasets):
                a, b, targets = draw(rng, n)
                deltas = paired_summary(a, b, targets, seed=i, n_resamples=RESAMPLES)
                for metric in metrics:
                    now[metric].append(deltas[metric].p)
                    if metric in ("NLL", "BS"):
                        before[metric].append(former_p(per_question(a, targets, metric)
                                                       - per_question(b, targets, metric), i))
            for metric in metrics:
                shown = f" / {rate(before[metric]):.1f}" if before[metric] else ""  # ACC's and AUC's are unchanged
                rows[metric].append(f"{rate(now[metric]):.1f}{' ✓' if rate(now[metric]) <= bound else ''}{shown}")
        for metric in metrics:
            print(f"| {label}, {metric} | " + " | ".join(rows[metric]) + " |", flush=True)
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
