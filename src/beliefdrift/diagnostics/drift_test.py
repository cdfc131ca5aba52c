"""Is a method's EMD more than Monte Carlo noise? A test whose false-positive rate is at most its level for every
martingale, with power against drift towards a fixed option and towards the model's own current answer alike.

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

**The increments.** Û is a sum over rollouts of Y_j = ⟨S_j, X_j⟩, S_j = Σ_{i<j} X_i (2 Σ_j Y_j = J(J − 1) Û). Given the
earlier rollouts E[Y_j] = ⟨S_j, E X_j⟩: 0 under a martingale, (j − 1) ‖p^(k) − p^(1)‖² on average under a drift. Since
θ^{(j)} lies in the simplex, L_j ≤ Y_j ≤ U_j with L_j = min_a S_j(a) − ⟨S_j, p^(1)⟩ and U_j = max_a S_j(a) −
⟨S_j, p^(1)⟩, both known before rollout j is drawn (summed over k for EMD‾, where X_j stacks every k). The records
store (Y_j, L_j, U_j) / s_j, s_j = √(j − 1) ρ, ρ = Σ_a p^(1)(a) (1 − p^(1)(a)) the spread of a draw from p^(1), a
scale fixed before any rollout (`rollout_terms`, `KStep.bets`).

**The test.** Two wealth processes over the rollouts of all questions, in order, each a nonnegative martingale of
mean 1 under every martingale because each factor 1 + b_j Y_j has a stake b_j ≥ 0 fixed before rollout j with
b_j |L_j| < 1 (so the factor is > 0) and E[Y_j | past] = 0:

- the *largest stake*: b_j = c / |L_j|, the mean over c ∈ `BET_FRACTIONS` of Π (1 + c Z_j), Z_j = Y_j / |L_j| ≥ −1.
  It finds a pull towards a fixed option with few rollouts, but its stake depends on the direction of S_j: when
  each answer that agrees with the current mode moves θ further, the rollouts that point away from the mode get the
  large stakes and the mean of Z_j turns negative while E[Û] > 0;
- the *plug-in stake*: b_j s_j = min(√(2 log(1/α) / (σ̂²_{j−1} n)), `STAKE_CAP` s_j / max(|L_j|, U_j)) on V_j = Y_j /
  s_j, σ̂² the mean of the earlier V² (`PRIOR_WEIGHT` pseudo-values of 1), n the number of increments, α =
  `DRIFT_LEVEL` (the stake at which a drift at the edge of detection grows the wealth fastest; Waudby-Smith & Ramdas
  2024). Unless capped, the stake does not depend on S_j, so E[b_j Y_j] follows E[Û]: it sees drift towards the mode.

The test's e-process is E_t = `STAKE_WEIGHT` · (largest stake) + (1 − `STAKE_WEIGHT`) · (plug-in stake), a mean of
nonnegative martingales of mean 1, and p = min(1, 1 / max_t E_t): P(p ≤ α) ≤ α by Ville's inequality, for every
martingale, any number of questions and rollouts, whatever the step sizes. It is conservative (Ville's inequality
is not tight), and exact predictives have no noise: their drift is reported as is, without a p.
`bench/drift_floor.py` measures the size on many martingales and the power against pulls and self-reinforcing and
sharpening drifts, beside a t-test (docs/statistics.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

#: What the stored drift test is, pinned in the `emd` run identity: a store of another test's records (the t-test's,
#: or the single-bet test's increments Y_j / |L_j|) is not resumed with this one.
DRIFT_TEST = "betting e-process over rollouts of the sequential U-statistic: largest and plug-in stakes, Ville"
DRIFT_LEVEL = 0.025  # level of the drift flag (as the urn floor's one-sided 97.5% point)
#: The bet fractions c of the largest-stake wealth: the midpoints of 20 equal cells of [0, 1) (a uniform prior on c).
BET_FRACTIONS = (np.arange(20) + 0.5) / 20
#: The share of the e-process on the largest stake (the rest on the plug-in stake): fixed before the data, from a
#: pilot simulation of its own (seed 1) at which ¼ kept most of the largest stake's power on pulls.
STAKE_WEIGHT = 0.25
#: The plug-in stake never exceeds this share of what the bound allows, max(|L_j|, U_j) · b_j ≤ `STAKE_CAP`.
STAKE_CAP = 0.5
#: Pseudo-values of V² = 1 behind σ̂² before any increment.
PRIOR_WEIGHT = 1.0
#: No bet on rollout j where the bound or the scale is below this: S_j or ρ is then 0 up to float rounding (any
#: predictable bet, none included, is valid).
BET_TOLERANCE = 1e-12


@dataclass(frozen=True)
class DriftTest:
    """Mean over questions of the unbiased ‖p^(k) − p^(1)‖₂² (`estimate`) and its standard error (None with fewer than
    2 questions, or exact predictives); p = min(1, 1/max_t E_t) of the betting e-process (None where the predictives
    were exact or the records hold no betting terms)."""

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


def rollout_terms(earlier: torch.Tensor, theta: torch.Tensor, start: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Y_j = ⟨S_j, θ_j − p⟩ and its bounds over the simplex, L_j = min_a S_j(a) − ⟨S_j, p⟩ ≤ Y_j ≤ U_j = max_a S_j(a) −
    ⟨S_j, p⟩, from S_j = `earlier` (Σ_{i<j} X_i), θ_j = `theta` and p = `start`, all [..., |𝒜|] (broadcast): [...]."""
    anchor = torch.linalg.vecdot(earlier, start)
    least, most = torch.aminmax(earlier, dim=-1)
    return torch.linalg.vecdot(earlier, theta) - anchor, least - anchor, most - anchor


def bet_terms(cross: torch.Tensor, least: torch.Tensor, most: torch.Tensor, spread: torch.Tensor) -> torch.Tensor:
    """The stored terms (Y_j, L_j, U_j) / s_j, s_j = √(j − 1) ρ, of rollouts j = 1 … J from Y_j (`cross`), L_j
    (`least`), U_j (`most`), all [..., J], and each prefix's ρ (`spread`, [...]): [..., J, 3]. Zero where
    max(|L_j|, U_j) or s_j is at most `BET_TOLERANCE` (rollout 1, or S_j = 0 up to rounding: no bet), and L_j = 0
    where |L_j| is (no largest stake)."""
    scale = torch.arange(cross.shape[-1], dtype=cross.dtype).sqrt() * spread[..., None]
    bet = (torch.maximum(-least, most) > BET_TOLERANCE) & (scale > BET_TOLERANCE)
    least = torch.where(-least > BET_TOLERANCE, least, torch.zeros_like(least))
    terms = torch.stack([cross, least, most], -1) / torch.where(bet, scale, torch.ones_like(scale))[..., None]
    return torch.where(bet[..., None], terms, torch.zeros_like(terms))


def _largest_stake(terms: np.ndarray) -> np.ndarray:
    """log of mean_c Π_{i≤t} (1 + c Z_i), Z = Y / |L| clipped at −1 against rounding (0 where L = 0): [..., n]."""
    room = -terms[..., 1]
    z = np.clip(np.divide(terms[..., 0], room, out=np.zeros_like(room), where=room > 0), -1.0, None)
    log_wealth = np.cumsum(np.log1p(BET_FRACTIONS[:, None, None] * z.reshape(1, -1, z.shape[-1])), -1)
    top = log_wealth.max(0)
    return (np.log(np.exp(log_wealth - top).mean(0)) + top).reshape(z.shape)


def _plug_in_stake(terms: np.ndarray) -> np.ndarray:
    """log Π_{i≤t} (1 + b_i V_i), b_i = min(√(2 log(1/α) / (σ̂²_{i−1} n)), `STAKE_CAP` / max(|l_i|, u_i)): [..., n]."""
    v, bound = terms[..., 0], np.maximum(-terms[..., 1], terms[..., 2])
    count = v.shape[-1]
    earlier = np.cumsum(v * v, -1) - v * v
    variance = (earlier + PRIOR_WEIGHT) / (np.arange(count) + PRIOR_WEIGHT)
    stake = np.sqrt(2 * math.log(1 / DRIFT_LEVEL) / (variance * count))
    stake = np.minimum(stake, np.divide(STAKE_CAP, bound, out=np.full_like(bound, np.inf), where=bound > 0))
    return np.cumsum(np.log1p(stake * v), -1)


def betting_p(terms: np.ndarray) -> np.ndarray | float:
    """p = min(1, 1 / max_t E_t) of the e-process E_t = `STAKE_WEIGHT` · largest stake + (1 − `STAKE_WEIGHT`) ·
    plug-in stake over the terms [..., n, 3] of n rollouts in order (`bet_terms`): one p per leading index (a float
    for [n, 3]; 1 with no terms)."""
    terms = np.asarray(terms, dtype=np.float64)
    if terms.shape[-2] == 0:
        return 1.0 if terms.ndim == 2 else np.ones(terms.shape[:-2])
    log_e = np.logaddexp(math.log(STAKE_WEIGHT) + _largest_stake(terms),
                         math.log(1 - STAKE_WEIGHT) + _plug_in_stake(terms))
    p = np.minimum(1.0, np.exp(-np.maximum(log_e.max(-1), 0.0)))
    return float(p) if terms.ndim == 2 else p


def drift_test(values: Sequence[float], exact: bool, bets: Sequence[Sequence[Sequence[float]]] | None = None
               ) -> DriftTest:
    """The drift test over questions: `values` each question's Û, `bets` each question's betting terms (`KStep.bets`,
    as stored: rows (Y, L, U) / s, any number per question). p from `betting_p` over all of them in question order;
    None when `exact` or without `bets`. The standard error of the mean Û is s/√Q (None below 2 questions)."""
    x = np.asarray(values, dtype=np.float64)
    mean = float(x.mean())
    se = float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 and not exact else None
    if exact or bets is None:
        return DriftTest(mean, se, None, exact, len(x))
    terms = [np.asarray(question, dtype=np.float64).reshape(-1, 3) for question in bets]
    return DriftTest(mean, se, float(betting_p(np.concatenate([np.zeros((0, 3)), *terms]))), exact, len(x))
