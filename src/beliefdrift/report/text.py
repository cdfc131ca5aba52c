"""Plain-text report pieces shared by the commands: Markdown tables and `mean ± std` cells."""

from __future__ import annotations

from collections.abc import Sequence


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table of already formatted cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def plus_minus(mean: float, std: float, digits: int = 3) -> str:
    """`mean ± std` with `digits` decimals, e.g. `0.125 ± 0.031`."""
    return f"{mean:.{digits}f} ± {std:.{digits}f}"
