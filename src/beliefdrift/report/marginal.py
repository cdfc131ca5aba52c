"""Marginal-drift figures of the drift command from its stored records (the paper's Figure 1): one question's
panels, and E[θ_n] per option position averaged over questions."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from beliefdrift.data.question import MCQuestion
from beliefdrift.diagnostics.marginal import MarginalDrift, average_drift
from beliefdrift.engine.methods import Method
from beliefdrift.report.plots import plot_marginal_drift


def record_drift(record: Mapping[str, Any]) -> MarginalDrift:
    """A stored record's `marginal_mean` and `marginal_std` ([N+1, K] lists) as a MarginalDrift."""
    return MarginalDrift(torch.tensor(record["marginal_mean"]), torch.tensor(record["marginal_std"]))


def average_panels(
    questions: Sequence[MCQuestion], methods: Sequence[Method], records: Mapping[str, Sequence[Mapping[str, Any]]]
) -> tuple[list[tuple[str, MarginalDrift]], tuple[str, ...], int, int]:
    """One panel per method: E[θ_n](a) = (1/Q) Σ_q mean_q[n, a] (and the mean per-question std) over the Q
    questions with the most common number of options K, by option position; also their labels, K and Q.
    `records[method name][i]` belongs to `questions[i]`."""
    count, _ = Counter(q.num_choices for q in questions).most_common(1)[0]
    keep = [i for i, q in enumerate(questions) if q.num_choices == count]
    panels = [(m.title, average_drift([record_drift(records[m.name][i]) for i in keep])) for m in methods]
    return panels, questions[keep[0]].labels, count, len(keep)


def plot_average_drift(
    questions: Sequence[MCQuestion],
    methods: Sequence[Method],
    records: Mapping[str, Sequence[Mapping[str, Any]]],
    path: Path,
    dataset: str,
) -> list[Path]:
    """The figure of `average_panels`, written as `path`.png and .pdf."""
    panels, labels, count, kept = average_panels(questions, methods, records)
    return plot_marginal_drift(panels, labels, path, title=f"{dataset}: mean over {kept} questions "
                                                          f"({count} options, by option position)")
