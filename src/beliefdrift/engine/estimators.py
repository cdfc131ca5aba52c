"""Answer-distribution estimates from PPR trajectories (seeds are never counted as answers)."""

from __future__ import annotations

import torch

from beliefdrift.engine.resampling import Trajectories


def answer_frequencies(traj: Trajectories) -> torch.Tensor:
    """Per-path empirical frequencies θ̄_N^{(j)}(a) = N_a / N of the generated answers: [J, K]."""
    counts = torch.zeros(traj.num_paths, traj.num_labels, dtype=torch.float64)
    counts.scatter_add_(1, traj.answers, torch.ones_like(traj.answers, dtype=torch.float64))
    return counts / traj.num_steps


def martingale_posterior_mean(traj: Trajectories) -> torch.Tensor:
    """The paper's q* = (1/J) Σ_j θ̄_N^{(j)}: the mean answer frequency over paths [K]."""
    return answer_frequencies(traj).mean(0)


def rao_blackwell_mean(traj: Trajectories) -> torch.Tensor:
    """q*_RB = (1/J) Σ_j (1/N) Σ_{n<N} θ_n^{(j)}: E[1{A_{n+1}=a} | A_{1:n}] = θ_n(a), so same mean as q*,
    lower variance."""
    return traj.thetas[:, : traj.num_steps].double().mean((0, 1))


def first_step_estimate(traj: Trajectories) -> torch.Tensor:
    """θ̂_1: the first-step distribution θ_0 averaged over paths (over their seeds, if any) [K]."""
    return traj.thetas[:, 0].double().mean(0)

