"""Marginal drift: E[θ_n] = p(A_{n+1} = · | x_Q) and its spread across paths, against n.

A martingale has E[θ_n] constant in n; a trend in the mean is drift (the paper's Figure 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from beliefdrift.engine.resampling import Trajectories


@dataclass(frozen=True)
class MarginalDrift:
    """mean[n, a] = (1/J) Σ_j θ_n^{(j)}(a) and std[n, a] across paths, for n = 0 … N."""

    mean: torch.Tensor  # [N+1, K]
    std: torch.Tensor  # [N+1, K]


def marginal_drift(traj: Trajectories) -> MarginalDrift:
    """E[θ_n] = (1/J) Σ_j θ_n^{(j)} and the sample std across the J paths (ddof 1; 0 for one path), n = 0 … N."""
    thetas = traj.thetas.double()
    std = thetas.std(0, correction=1) if traj.num_paths > 1 else torch.zeros_like(thetas[0])
    return MarginalDrift(thetas.mean(0), std)


def average_drift(drifts: list[MarginalDrift]) -> MarginalDrift:
    """Average per-question curves (same N and K) into one; std is the mean per-question std."""
    return MarginalDrift(
        torch.stack([d.mean for d in drifts]).mean(0), torch.stack([d.std for d in drifts]).mean(0)
    )


def marginal_shift(drift: MarginalDrift) -> torch.Tensor:
    """‖E[θ_n] − E[θ_0]‖_1 for n = 0 … N: a label-free drift curve (0 for a martingale up to sampling noise),
    comparable and averageable across questions with different options."""
    return (drift.mean - drift.mean[0]).abs().sum(-1)
