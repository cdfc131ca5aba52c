"""Summaries over questions shared by the diagnostics and the report: mean ± std of per-question numbers or curves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def mean_std(values: Sequence[Any], ddof: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std over the first axis of Q per-question numbers or equal-length curves, in float64:
    std = √(Σ_q (x_q − x̄)² / (Q − ddof)) (ddof 1: the sample std, 0: the population std); 0 when Q ≤ ddof."""
    stacked = torch.tensor(values, dtype=torch.float64)
    return stacked.mean(0), (stacked.std(0, correction=ddof) if len(values) > ddof else torch.zeros_like(stacked[0]))
