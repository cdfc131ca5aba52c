"""Plain-text report pieces shared by the commands: Markdown tables and mean ± std over questions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table of already formatted cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def mean_std(values: Sequence[Any], ddof: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std over the first axis of Q per-question numbers or equal-length curves, in float64:
    std = √(Σ_q (x_q − x̄)² / (Q − ddof)) (ddof 1: the sample std, 0: the population std); 0 when Q ≤ ddof."""
    stacked = torch.tensor(values, dtype=torch.float64)
    return stacked.mean(0), (stacked.std(0, correction=ddof) if len(values) > ddof else torch.zeros_like(stacked[0]))


def plus_minus(mean: float, std: float, digits: int = 3) -> str:
    """`mean ± std` with `digits` decimals, e.g. `0.125 ± 0.031`."""
    return f"{mean:.{digits}f} ± {std:.{digits}f}"
