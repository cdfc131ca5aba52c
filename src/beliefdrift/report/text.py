"""Plain-text report pieces shared by the commands: Markdown tables and `mean ± std` cells."""

from __future__ import annotations

from collections.abc import Sequence


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table of already formatted cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def fixed(value: float, digits: int = 4) -> str:
    """`value` with `digits` decimals, never `-0.0000` (a KL of rounding noise below zero prints as 0)."""
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def plus_minus(mean: float, std: float, digits: int = 3) -> str:
    """`mean ± std` with `digits` decimals, e.g. `0.125 ± 0.031`."""
    return f"{fixed(mean, digits)} ± {fixed(std, digits)}"


def markdown_cell(text: str) -> str:
    """`text` from a file (a data file's name, a question id) as one Markdown table cell: `|` and `\\` escaped, line
    breaks as spaces, so the table keeps its columns."""
    return " ".join(text.replace("\\", "\\\\").replace("|", "\\|").split())
