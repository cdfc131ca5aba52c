"""Plain-text report pieces shared by the commands: Markdown tables that fit a terminal and `mean ± std` cells."""

from __future__ import annotations

from collections.abc import Sequence

#: The widest line a command's table prints (characters): wider tables are split (`markdown_table`).
WIDTH = 100


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], keep: int = 1,
                   groups: Sequence[int] | None = None, width: int = WIDTH) -> str:
    """GitHub-flavoured Markdown tables of already formatted cells, no line wider than `width` where one can be: a
    table too wide is split into several, each repeating the first `keep` columns (the row labels) and taking the
    column groups after them (`groups`: their sizes; default one column each) in order while its lines fit."""
    sizes = list(groups) if groups is not None else [1] * (len(header) - keep)
    if sum(sizes) != len(header) - keep:
        raise ValueError(f"column groups {sizes} do not cover the {len(header) - keep} columns after the first {keep}")
    lines = [header, *rows]

    def line_width(indices: Sequence[int]) -> int:  # the widest of `| a | b |`: each cell and its separator
        return max(1 + sum(len(line[i]) + 3 for i in indices) for line in lines)

    chunks: list[list[int]] = []
    start = keep
    for size in sizes:
        group = list(range(start, start + size))
        start += size
        if chunks and line_width([*range(keep), *chunks[-1], *group]) <= width:
            chunks[-1] += group
        else:
            chunks.append(group)
    return "\n\n".join(_table([*range(keep), *chunk], header, rows) for chunk in chunks or [[]])


def _table(indices: Sequence[int], header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header[i] for i in indices) + " |", "|" + "|".join("---" for _ in indices) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row[i] for i in indices) + " |" for row in rows])


def fixed(value: float, digits: int = 4) -> str:
    """`value` with `digits` decimals, rounded once from its exact binary value (an exact tie to even), never
    `-0.0000` (a KL of rounding noise below zero prints as 0): the one rounding of every table; the explorer's
    `fixed` (templates/explorer.js) writes the same digits."""
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def plus_minus(mean: float, std: float, digits: int = 3) -> str:
    """`mean ± std` with `digits` decimals, e.g. `0.125 ± 0.031`."""
    return f"{fixed(mean, digits)} ± {fixed(std, digits)}"


def wrote(out: object, names: Sequence[str]) -> str:
    """A command's last message: every file and folder it wrote into `out`, e.g. `wrote to runs/x: run.sqlite (the
    results), summary.md and summary.json`."""
    listed = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names)
    return f"wrote to {out}: {listed}"


def markdown_cell(text: str) -> str:
    """`text` from a file (a data file's name, a question id) as one Markdown table cell: `|` and `\\` escaped, line
    breaks as spaces, so the table keeps its columns."""
    return " ".join(text.replace("\\", "\\\\").replace("|", "\\|").split())
