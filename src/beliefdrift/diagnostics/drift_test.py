"""Is a method's EMD more than Monte Carlo noise? A test whose false-positive rate is at most its level for every
martingale.

The paper's EMD is a plug-in distance d(p̂^(k), p^(1)) ≥ 0, biased upward by the noise of p̂^(k) by an amount that
depends on how far the model's own paths spread, so no single null process (the Pólya urn of `noise_floor`) gives
its floor for every martingale. The test therefore uses a second estimate of the same hypothesis, p^(k) = p^(1) for
every k (which all of L1, KL and TV call drift 0). From the J rollouts behind p̂^(k), independent given the prefix,
with X_j = θ^{(j)}_{n+k−1} − p^(1)_n, the U-statistic

    Û_k = Σ_{i≠j} ⟨X_i, X_j⟩ / (J(J − 1))   (`KStep.sq_drift`)

has E[Û_k | prefix] = ‖p^(k) − p^(1)‖₂²: 0 for every martingale, > 0 for any drift. Its mean over questions is
reported (`estimate`, with its standard error), but a t-test over questions of Û is not valid: near a vertex of the
simplex Û is small and positive for most questions and rarely very negative, and the t-test then flags exact
martingales (an urn at θ_max = 0.9999 in 78% of runs). No test that uses only the spread of the observed values can
hold its level there (Bahadur–Savage); the test uses a bound instead.

**The test.** Û is a sum over rollouts of Y_j = ⟨S_j, X_j⟩, S_j = Σ_{i<j} X_i (2 Σ_j Y_j = J(J − 1) Û). Given the
earlier rollouts, E[Y_j] = ⟨S_j, E X_j⟩ = 0 under a martingale, and since θ^{(j)} lies in the simplex,
Y_j ≥ L_j = min_a S_j(a) − ⟨S_j, p^(1)⟩, a bound known before rollout j is drawn (summed over k for EMD‾, where X_j
stacks every k). So the increments Z_j = Y_j / |L_j| ≥ −1 have conditional mean 0 under the null and mean > 0 under
a drift, and for every c ∈ [0, 1) the wealth Π (1 + c Z_j) over all rollouts of all questions is a nonnegative
martingale of mean 1 (Waudby-Smith & Ramdas 2024, testing by betting). The test's e-value is its average over the
bet fractions `BET_FRACTIONS`, E = mean_c Π (1 + c Z_j), and p = min(1, 1/E): P(p ≤ α) ≤ α by Markov's inequality,
for every martingale, any number of questions and rollouts, whatever the step sizes (near vertices |L_j| shrinks
with the steps, so nothing is flagged there). It is conservative (no null reaches its level: Markov's inequality is
not tight), and exact predictives have no noise: their drift is reported as is, without a p. `bench/drift_floor.py`
measures the size on many martingales and the power against a drift (docs/statistics.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import logsumexp

#: What the stored drift test is, pinned in the `emd` run identity: a store of another test's records (the t-test's,
#: without betting increments) is not resumed with this one.
DRIFT_TEST = "betting e-value over rollouts of the sequential U-statistic, simplex bounds"
DRIFT_LEVEL = 0.025  # level of the drift flag (as the urn floor's one-sided 97.5% point)
#: The bet fractions c of the e-value: the midpoints of 20 equal cells of [0, 1) (a uniform prior over c).
BET_FRACTIONS = (np.arange(20) + 0.5) / 20
#: No bet on rollout j where |L_j| is below this: S_j is then 0 up to float rounding (any predictable bet is valid).
BET_TOLERANCE = 1e-12


@dataclass(frozen=True)
class DriftTest:
    """Mean over questions of the unbiased ‖p^(k) − p^(1)‖₂² (`estimate`) and its standard error (None with fewer than
    2 questions, or exact predictives); p = min(1, 1/E) of the betting e-value (None where the predictives were exact
    or the records hold no betting increments)."""

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


def bet_increments(cross: torch.Tensor, least: torch.Tensor) -> torch.Tensor:
    """Z_j = Y_j / |L_j| from Y_j = ⟨S_j, X_j⟩ (`cross`) and its lower bound L_j (`least`), both [..., J]; 0 where
    |L_j| ≤ `BET_TOLERANCE` (rollout 1, or every earlier rollout at p^(1)); clipped at −1 against float rounding."""
    room = -least
    bet = room > BET_TOLERANCE
    ratio = cross / torch.where(bet, room, torch.ones_like(room))
    return torch.where(bet, ratio, torch.zeros_like(cross)).clamp(min=-1)


def betting_p(increments: np.ndarray) -> float:
    """p = min(1, 1/E), E = mean over c ∈ `BET_FRACTIONS` of Π_j (1 + c Z_j) for the increments Z_j ≥ −1 (1 with
    none)."""
    z = np.asarray(increments, dtype=np.float64).ravel()
    log_wealth = np.log1p(BET_FRACTIONS[:, None] * z[None]).sum(1)
    log_e = float(logsumexp(log_wealth) - np.log(len(BET_FRACTIONS)))
    return float(min(1.0, np.exp(-log_e)))


def drift_test(values: Sequence[float], exact: bool, bets: Sequence[Sequence[float]] | None = None) -> DriftTest:
    """The drift test over questions: `values` each question's Û, `bets` each question's betting increments Z_j
    (`KStep.bets`, as stored; any length). p from `betting_p` over all of them; None when `exact` or without
    `bets`. The standard error of the mean Û is s/√Q (None below 2 questions)."""
    x = np.asarray(values, dtype=np.float64)
    mean = float(x.mean())
    se = float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 and not exact else None
    if exact or bets is None:
        return DriftTest(mean, se, None, exact, len(x))
    increments = [np.asarray(question, dtype=np.float64).ravel() for question in bets]
    return DriftTest(mean, se, betting_p(np.concatenate([np.zeros(0), *increments])), exact, len(x))
