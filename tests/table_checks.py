"""What every table a command prints must be: titled (a bold title, or the continuation of a table split to fit)
and no wider than `report.text.WIDTH` columns."""

from __future__ import annotations

import re

from beliefdrift.report.text import WIDTH


def table_problems(text: str) -> list[str]:
    """Each table line wider than `WIDTH`, and each table (a block of `|` lines) not preceded by a `**title**`
    paragraph or by another table (a split table's continuation)."""
    blocks = [block.splitlines() for block in re.split(r"\n\s*\n", text) if block.strip()]
    problems = [f"{len(line)} columns: {line}" for block in blocks for line in block
                if line.startswith("|") and len(line) > WIDTH]
    for before, block in zip([[""], *blocks], blocks, strict=False):
        if block[0].startswith("|") and not before[0].startswith(("**", "|")):
            problems.append(f"untitled table: {block[0]}")
    return problems
