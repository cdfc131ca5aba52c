"""A c.i.d. check in the style of Falck et al. (2024): do early and late answers have the same distribution?

If A_1, A_2, … is conditionally identically distributed every A_n has the same marginal, so for each path the
difference D^{(j)} = freq(A^{(j)}_{1:h}) − freq(A^{(j)}_{N−h+1:N}), h = ⌊N/2⌋ (the middle answer of an odd N is
dropped), has expectation 0. We report D̄ = (1/J) Σ_j D^{(j)} per option with a percentile bootstrap band over paths;
a band that excludes 0 for some option is evidence of drift.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from beliefdrift.metrics.functional import resample_indices


@dataclass(frozen=True)
class CIDCheck:
    """difference[a] = D̄(a); [low, high] its bootstrap band at `level`; l1 = Σ_a |D̄(a)|."""

    difference: torch.Tensor  # [|𝒜|] float64
    low: torch.Tensor  # [|𝒜|]
    high: torch.Tensor  # [|𝒜|]
    level: float

    @property
    def l1(self) -> float:
        return float(self.difference.abs().sum())

    @property
    def consistent(self) -> bool:
        """Whether 0 lies inside every option's band (no evidence against c.i.d. at this level)."""
        return bool(((self.low <= 0) & (self.high >= 0)).all())


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
    """D̄ over the J paths of `answers` [J, N] (generated answers only, no seeds) and its bootstrap band: resample
    paths with replacement `resamples` times (with `generator`) and take the (1 ∓ level)/2 quantiles of D̄."""
    differences = half_differences(answers, num_labels)
    paths = differences.shape[0]
    index = torch.from_numpy(resample_indices(paths, resamples, generator))
    means = differences[index].mean(1)  # [resamples, |𝒜|]
    tail = (1 - level) / 2
    low, high = torch.quantile(means, torch.tensor([tail, 1 - tail], dtype=torch.float64), dim=0)
    return CIDCheck(differences.mean(0), low, high, level)
