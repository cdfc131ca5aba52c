"""A c.i.d. check in the style of Falck et al. (2024): do early and late answers have the same distribution?

If A_1, A_2, … is conditionally identically distributed every A_n has the same marginal, so for each path the
difference D^{(j)} = freq(A^{(j)}_{1:h}) − freq(A^{(j)}_{N−h+1:N}), h = ⌊N/2⌋ (the middle answer of an odd N is
dropped), has expectation 0. The check is one test of that vector over all options: the sign-flip p-value of
T = ‖D̄‖₁, D̄ = (1/J) Σ_j D^{(j)}, flipping the sign of whole paths' D^{(j)}. It is exact when the answers are
exchangeable (swapping a path's halves then leaves its law unchanged, so D^{(j)} is symmetric about 0) and
approximate for a c.i.d. sequence that is not. Beside it, each option's D̄(a) has a percentile bootstrap band over
paths, to show where a difference lies; the bands are not the test (one band per option rejects a c.i.d. urn far
more often than 5%: 26–30% with 5 options).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from beliefdrift.metrics.functional import resample_indices

#: What the stored check is, pinned in the run identity of the commands that store it: a store written by another
#: test (an earlier beliefdrift's per-option bands) is not resumed with this one.
CID_TEST = "sign-flip test of the L1 norm of the mean half difference"
#: Paths up to which every sign pattern is enumerated (2^13 = 8192); above, random patterns.
EXACT_PATHS = 13
#: The level at which the commands reject (`cid_check` runs at its default level, 1 − CID_ALPHA).
CID_ALPHA = 0.05


@dataclass(frozen=True)
class CIDCheck:
    """difference[a] = D̄(a); [low, high] its bootstrap band at `level`; l1 = ‖D̄‖₁; p the sign-flip p-value of
    ‖D̄‖₁ (`sign_flip_l1_p`)."""

    difference: torch.Tensor  # [|𝒜|] float64
    low: torch.Tensor  # [|𝒜|]
    high: torch.Tensor  # [|𝒜|]
    level: float
    p: float

    @property
    def l1(self) -> float:
        return float(self.difference.abs().sum())

    @property
    def consistent(self) -> bool:
        """No evidence against c.i.d. at this level: p > 1 − level."""
        return self.p > 1 - self.level


def half_differences(answers: torch.Tensor, num_labels: int) -> torch.Tensor:
    """D^{(j)}: first-half minus second-half answer frequencies of each path, answers [J, N] → [J, |𝒜|]."""
    half = answers.shape[1] // 2
    if half == 0:
        raise ValueError("the c.i.d. check needs at least 2 answers per path")
    onehot = torch.nn.functional.one_hot(answers, num_labels).double()
    return onehot[:, :half].mean(1) - onehot[:, -half:].mean(1)


def cid_check(
    answers: torch.Tensor, num_labels: int, generator: torch.Generator, resamples: int = 1000, level: float = 0.95
) -> CIDCheck:
    """D̄ over the J paths of `answers` [J, N] (generated answers only, no seeds), its bootstrap band (resample paths
    with replacement `resamples` times with `generator`, the (1 ∓ level)/2 quantiles of D̄) and the sign-flip
    p-value of ‖D̄‖₁ (random patterns drawn after the bootstrap, so the bands do not depend on the test)."""
    differences = half_differences(answers, num_labels)
    paths = differences.shape[0]
    index = torch.from_numpy(resample_indices(paths, resamples, generator))
    means = differences[index].mean(1)  # [resamples, |𝒜|]
    tail = (1 - level) / 2
    low, high = torch.quantile(means, torch.tensor([tail, 1 - tail], dtype=torch.float64), dim=0)
    return CIDCheck(differences.mean(0), low, high, level, sign_flip_l1_p(differences, generator, resamples))


def smallest_p(paths: int, resamples: int = 1000) -> float:
    """The smallest p-value `sign_flip_l1_p` can give with `paths` paths: 2 / 2^J (the observed pattern and its
    negation) when it enumerates, else 1 / (resamples + 1); at `CID_ALPHA` the check needs `MIN_PATHS`."""
    return 2 / 2**paths if paths <= EXACT_PATHS else 1 / (resamples + 1)


#: The fewest paths with which the check can reject at `CID_ALPHA` (6: 2/2^6 ≤ 5% < 2/2^5).
MIN_PATHS = next(paths for paths in range(1, EXACT_PATHS + 1) if smallest_p(paths) <= CID_ALPHA)


def sign_flip_l1_p(differences: torch.Tensor, generator: torch.Generator, resamples: int = 1000) -> float:
    """p-value of T = ‖mean_j D^{(j)}‖₁ against T under sign flips of whole rows of `differences` [J, |𝒜|]:
    #{patterns s: ‖mean_j s_j D^{(j)}‖₁ ≥ T} / 2^J over all 2^J patterns up to `EXACT_PATHS` paths, else
    (1 + #{random patterns with T_s ≥ T}) / (resamples + 1)."""
    paths = differences.shape[0]
    exact = paths <= EXACT_PATHS
    if exact:
        bits = torch.arange(2**paths).unsqueeze(1).bitwise_right_shift(torch.arange(paths)).bitwise_and(1)
    else:
        bits = torch.randint(2, (resamples, paths), generator=generator)
    signs = 1.0 - 2.0 * bits.double()  # [patterns, J]; the all-plus pattern is the observed T
    flipped = (signs @ differences / paths).abs().sum(1)
    observed = float(differences.mean(0).abs().sum())
    at_least = int((flipped >= observed - 1e-12).sum())  # 1e-12: ties in exact arithmetic that rounding splits
    return at_least / len(signs) if exact else (1 + at_least) / (resamples + 1)
