"""Drift of reasoning trajectories in embedding space (the paper's Appendix F).

The centroid of generated pair n over the R rollouts of a question is h̄_n = (1/|R_n|) Σ_{r ∈ R_n} H^{(r)}_n,
where R_n holds the rollouts that generated at least n pairs (rollouts that stopped early drop out of
the later centroids). Drift is read off c_n = cos(h̄_n, h̄_{n+τ}) for n = 1 … N−τ: positions whose n+τ
lies beyond the N generated pairs are dropped, and c_n is NaN when no rollout reached n+τ. Reasoning
seeds are never positions: n counts generated pairs only. Across questions: mean ± std of c_n over the
questions where it is defined.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch


def centroids(embeddings: Sequence[torch.Tensor], num_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """h̄_n for n = 1 … N as rows [N, H] (NaN where no rollout has pair n) and |R_n| [N].

    `embeddings[r]` [P_r, H] holds ψ of the pairs rollout r generated (P_r ≤ N is fine)."""
    dim = next((e.shape[-1] for e in embeddings if e.ndim == 2), 0)
    total = torch.zeros(num_positions, dim, dtype=torch.float64)
    count = torch.zeros(num_positions, dtype=torch.long)
    for rows in embeddings:
        rows = rows[:num_positions].double()
        total[: len(rows)] += rows
        count[: len(rows)] += 1
    return total / count[:, None], count


def cosine_matrix(points: torch.Tensor) -> torch.Tensor:
    """cos(h̄_i, h̄_j) [N, N] (NaN for undefined centroids or zero vectors)."""
    unit = points / points.norm(dim=-1, keepdim=True)
    return unit @ unit.T


def lag_curve(matrix: torch.Tensor, tau: int) -> list[float]:
    """c_n = matrix[n, n+τ] for n = 1 … N−τ (0-based rows), i.e. the τ-th superdiagonal."""
    if tau < 1:
        raise ValueError(f"tau must be positive, got {tau}")
    return torch.diagonal(matrix, offset=tau).tolist() if tau < len(matrix) else []


def centroid_cosine_curve(embeddings: Sequence[torch.Tensor], num_positions: int, tau: int) -> list[float]:
    """cos(h̄_n, h̄_{n+τ}) for n = 1 … N−τ over one question's rollouts."""
    return lag_curve(cosine_matrix(centroids(embeddings, num_positions)[0]), tau)


@dataclass(frozen=True)
class CurveStats:
    """Per position n = 1 …: mean and (population) std of c_n over the questions where it is defined."""

    mean: list[float]
    std: list[float]
    count: list[int]


def curve_stats(curves: Sequence[Sequence[float | None]]) -> CurveStats:
    """Mean ± std over questions of curves that may be NaN/None at some positions or differ in length."""
    length = max((len(c) for c in curves), default=0)
    mean, std, count = [], [], []
    for n in range(length):
        at_n = (c[n] for c in curves if n < len(c))
        values = [v for v in at_n if v is not None and not math.isnan(v)]
        column = torch.tensor(values, dtype=torch.float64)
        mean.append(column.mean().item() if values else math.nan)
        std.append(column.std(unbiased=False).item() if values else math.nan)
        count.append(len(values))
    return CurveStats(mean, std, count)
