"""Paired comparisons of methods on the same stored questions (`paired_scores`): Δ = method − baseline in every
metric, on the questions quality control keeps for both, with `metrics.paired_summary` (Δ, its percentile bootstrap
interval and two-sided p). Which pairs (`comparisons`): every method against PPR + NoSEED, and every AM-PPR method
against PPR + SEED_5 (the paper's fair comparison for a seeded AM-PPR). `report.paired` writes them as tables."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from beliefdrift.engine.methods import Method, parse_method
from beliefdrift.metrics.functional import PairedDelta, paired_summary
from beliefdrift.registry import canonical_methods
from beliefdrift.runs.scoring import QualityControl, excluded_units
from beliefdrift.runs.store import ResultRow

BASELINE = "ppr"
#: The baseline of every AM-PPR method, besides `BASELINE`.
SEEDED_BASELINE = "ppr-seed5"
#: The level of the paired intervals.
LEVEL = 0.95


def comparisons(methods: Iterable[str]) -> list[tuple[Method, Method]]:
    """(method, baseline) pairs among `methods`: each other method against `BASELINE` in table order, then each
    AM-PPR method against `SEEDED_BASELINE` (a pair needs both methods present)."""
    given = list(methods)
    names = canonical_methods(given) if given else ()
    pairs = [(name, BASELINE) for name in names if name != BASELINE and BASELINE in names]
    pairs += [(name, SEEDED_BASELINE) for name in names
              if parse_method(name).needs_adapter and SEEDED_BASELINE in names]
    return [(parse_method(name), parse_method(baseline)) for name, baseline in pairs]


@dataclass(frozen=True)
class PairedComparison:
    """Δ = method − baseline per metric name (METRIC_NAMES, or `EMD‾ (L1)` …) over `n` shared questions; `deltas`
    is empty when no question is shared."""

    method: Method
    baseline: Method
    n: int
    deltas: dict[str, PairedDelta] = field(default_factory=dict)


def paired_scores(
    rows: Sequence[ResultRow], qc: QualityControl | None = None, n_resamples: int = 1000, seed: int = 0
) -> list[PairedComparison]:
    """Every pair of `comparisons`, scored with `paired_summary` on the questions both methods keep under `qc`
    (`scoring.excluded_units`; their own estimates; in question order)."""
    excluded = excluded_units(rows, qc)
    kept: dict[str, dict[str, ResultRow]] = {row.method: {} for row in rows}
    for row in sorted(rows, key=lambda row: row.position):
        if (row.question_id, row.method) not in excluded:
            kept[row.method][row.question_id] = row
    out = []
    for method, baseline in comparisons(kept):
        a, b = kept[method.name], kept[baseline.name]
        shared = [qid for qid in b if qid in a]
        deltas = paired_summary([a[qid].probs for qid in shared], [b[qid].probs for qid in shared],
                                np.array([b[qid].target for qid in shared], dtype=np.int64),
                                n_resamples=n_resamples, seed=seed, level=LEVEL) if shared else {}
        out.append(PairedComparison(method, baseline, len(shared), deltas))
    return out
