"""Two evaluate runs compared on the questions they share (two models, dtypes or seeds on one benchmark): per
method, Δ = second run − first run in every metric, with the paired bootstrap interval and two-sided p of
`metrics.paired_summary` (the tests `report/paired.py` applies between two methods of one run, applied here between
two runs of one method). A question is shared when both runs stored it for the method with the same answer key and
quality control kept it in both (each run under its own rows: `runs.scoring.excluded_units`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from beliefdrift.metrics.functional import PairedDelta, paired_summary
from beliefdrift.registry import canonical_methods
from beliefdrift.report.paired import LEVEL
from beliefdrift.runs.scoring import QualityControl, excluded_units
from beliefdrift.runs.store import ResultRow


@dataclass(frozen=True)
class MethodDelta:
    """Δ = second run − first run of one method per metric name over `n` shared questions (empty when none)."""

    method: str
    n: int
    deltas: dict[str, PairedDelta] = field(default_factory=dict)


def kept_rows(rows: Sequence[ResultRow], qc: QualityControl | None) -> dict[str, dict[str, ResultRow]]:
    """{method: {question id: its row}} of the rows quality control keeps, in question order."""
    excluded = excluded_units(rows, qc)
    kept: dict[str, dict[str, ResultRow]] = {}
    for row in sorted(rows, key=lambda row: row.position):
        if (row.question_id, row.method) not in excluded:
            kept.setdefault(row.method, {})[row.question_id] = row
    return kept


def compare_runs(first: Sequence[ResultRow], second: Sequence[ResultRow], qc: QualityControl | None = None,
                 n_resamples: int = 1000, seed: int = 0) -> list[MethodDelta]:
    """Per method both runs hold (in table order): Δ = second − first on their shared questions (the first run's
    question order), every metric on the same resamples."""
    a, b = kept_rows(first, qc), kept_rows(second, qc)
    both = sorted({row.method for row in first} & {row.method for row in second})
    out = []
    for method in canonical_methods(both) if both else ():
        ours, theirs = a.get(method, {}), b.get(method, {})
        shared = [qid for qid, row in ours.items() if qid in theirs and theirs[qid].target == row.target
                  and theirs[qid].num_labels == row.num_labels]
        deltas = paired_summary([theirs[qid].probs for qid in shared], [ours[qid].probs for qid in shared],
                                np.array([ours[qid].target for qid in shared], dtype=np.int64),
                                n_resamples=n_resamples, seed=seed, level=LEVEL) if shared else {}
        out.append(MethodDelta(method, len(shared), deltas))
    return out
