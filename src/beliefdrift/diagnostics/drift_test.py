"""Is a method's EMD more than Monte Carlo noise? A test whose false-positive rate holds for every martingale.

The paper's EMD is a plug-in distance d(p̂^(k), p^(1)) ≥ 0, biased upward by the noise of p̂^(k) by an amount that
depends on how far the model's own paths spread, so no single null process (the Pólya urn of `noise_floor`) gives
its floor for every martingale. The test therefore uses a second estimate of the same hypothesis, p^(k) = p^(1) for
every k (which all of L1, KL and TV call drift 0): from the J independent rollouts behind p̂^(k), with
X_j = θ^{(j)}_{n+k−1} − p^(1)_n, the U-statistic

    Û_k = Σ_{i≠j} ⟨X_i, X_j⟩ / (J(J − 1))   (`KStep.sq_drift`),

has E[Û_k | prefix] = ‖p^(k) − p^(1)‖₂² exactly, since the rollouts are independent given the prefix: 0 for every
martingale whatever its step sizes, > 0 for any drift. Each question gives one Û (averaged over prefixes and k for
EMD‾, at each b for EMD_k(b)); questions are independent, so the null says their mean is 0, tested one-sided with
Student's t over questions (`scipy.stats.ttest_1samp`), flagged at p < `DRIFT_LEVEL`. Validity rests on the number
of questions, not on a null model; `bench/drift_floor.py` measures the flag rate on several martingales and the
power against a drift (docs/statistics.md). Exact enumeration has no noise: the drift is reported as is, no p.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

DRIFT_LEVEL = 0.025  # one-sided level of the drift flag (as the urn floor's 97.5% point)


@dataclass(frozen=True)
class DriftTest:
    """Mean over questions of the unbiased ‖p^(k) − p^(1)‖₂² (`estimate`), its standard error and one-sided t-test
    p-value (None where the predictives were exact, or with fewer than 2 questions)."""

    estimate: float
    se: float | None
    p: float | None
    exact: bool
    questions: int

    @property
    def drifts(self) -> bool | None:
        """Flagged: p < `DRIFT_LEVEL` (Monte Carlo), estimate > 0 (exact), None when untestable."""
        if self.exact:
            return self.estimate > 0
        return None if self.p is None else self.p < DRIFT_LEVEL


def drift_test(values: Sequence[float], exact: bool) -> DriftTest:
    """One-sided t-test of mean(values) > 0 over questions: t = x̄ / (s/√Q), p from Student's t with Q − 1 d.f."""
    x = np.asarray(values, dtype=np.float64)
    mean = float(x.mean())
    if exact or len(x) < 2:
        return DriftTest(mean, None, None, exact, len(x))
    se = float(x.std(ddof=1) / np.sqrt(len(x)))
    p = float(stats.ttest_1samp(x, 0.0, alternative="greater").pvalue) if se > 0 else float(mean <= 0)
    return DriftTest(mean, se, p, exact, len(x))
