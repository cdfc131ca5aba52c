"""Paired comparisons of methods on the same questions, as the report writes them: Δ = method − baseline in every
metric (`runs.paired.paired_scores`), and in EMD‾.

Which pairs: every method against PPR + NoSEED, and every AM-PPR method against PPR + SEED_5 (`runs.paired`). A
metric's Δ is taken on the questions quality control keeps for both methods, with `metrics.paired_summary`: one
bootstrap index matrix over those questions scores both methods on the same resamples; the interval is the
percentile interval of the resampled Δ*. The two-sided p-value
follows one rule at every n (`metrics.paired_bootstrap`): for ACC the exact sign test of the per-question differences,
for NLL and BS a betting test of their mean within the metric's bound (`metrics.bounded_mean_p`: −log ε for NLL, 2
for BS; valid at every n for every distribution), for AUC the larger of a within-question swap permutation test and
the percentile bootstrap p (docs/statistics.md). Δ ECE has no interval
or p (NaN in `paired_summary` and paired.csv, † in the table, as Table 2 prints ECE; the metric registry says so,
`metrics.valid_only`): the binned plug-in's upward bias depends on how a method's confidences spread over the
bins, so Δ ECE is biased even between two calibrated methods. EMD‾ is compared the same way over the per-question
EMD‾ of the `emd` records (`metrics.paired_mean_bootstrap`, within the distance's bound `emd.DISTANCE_BOUNDS`).

Writes paired.md (one table per run, `Δ [low, high]` and p per metric) and paired.csv (one row per run × pair ×
metric) beside the report's tables.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from beliefdrift.diagnostics.emd import DISTANCE_BOUNDS
from beliefdrift.files import write_atomic
from beliefdrift.metrics.functional import METRIC_NAMES, PairedDelta, paired_mean_bootstrap
from beliefdrift.report.diagnostic_plots import DISTANCE_LABELS
from beliefdrift.report.tables import ARROWS_NOTE, DAGGER, MISSING, NOT_DEFINED, NOT_DEFINED_NOTE, arrow, format_value
from beliefdrift.report.text import markdown_table
from beliefdrift.runs.paired import BASELINE, LEVEL, PairedComparison, comparisons, paired_scores
from beliefdrift.runs.scoring import QualityControl
from beliefdrift.runs.store import STORE_FILE, RunStore

PAIRED_MD, PAIRED_CSV = "paired.md", "paired.csv"
#: How the p-values are computed, as the captions say it: of a mean such as EMD‾ (`EMD_P_RULE`), and of each metric.
EMD_P_RULE = ("a betting test of the mean within the metric's bound, valid at every n (near 1 where the bound leaves "
              "no power)")
P_RULE = (f"ACC: exact sign test; NLL, BS, EMD‾: {EMD_P_RULE}; AUC: the larger of a swap permutation test and the "
          "bootstrap p; the same rule at every n")
CSV_COLUMNS = ["dataset", "method", "baseline", "metric", "n", "delta", "low", "high", "p", "level", "n_resamples"]


def emd_comparisons(
    records: Mapping[str, Sequence[Mapping[str, Any]]], distances: Sequence[str], n_resamples: int = 1000,
    seed: int = 0,
) -> list[PairedComparison]:
    """Δ EMD‾ per distance for every pair of `comparisons` among `records` ({method name: one `emd` record per
    question, the same questions in the same order for every method}): the mean over questions of the method's
    EMD‾ minus the baseline's, with `paired_mean_bootstrap` within the distance's bound (keys `EMD‾ (L1)`, …)."""
    out = []
    for method, baseline in comparisons(records):
        a, b = records[method.name], records[baseline.name]
        deltas = {}
        for d in distances:
            key = f"emd_bar_{d}"
            deltas[f"EMD‾ ({DISTANCE_LABELS[d]})"] = paired_mean_bootstrap(
                [r[key] for r in a], [r[key] for r in b], bound=DISTANCE_BOUNDS[d], n_resamples=n_resamples,
                level=LEVEL, seed=seed)
        out.append(PairedComparison(method, baseline, len(a), deltas))
    return out


def delta_cell(metric: str, delta: PairedDelta | None) -> str:
    """`Δ [low, high]` in the units of the metric's table (ACC/AUC in points of %); `Δ †` where there is no valid
    interval (NaN bounds: `metrics.valid_only`, or no finite resample); `–` when not computed."""
    if delta is None:
        return MISSING
    text = format_value(metric, delta.delta)
    if math.isnan(delta.delta):
        return text
    if math.isnan(delta.low) or math.isnan(delta.high):
        return f"{text} {DAGGER}"
    return f"{text} [{format_value(metric, delta.low)}, {format_value(metric, delta.high)}]"


def p_cell(delta: PairedDelta | None) -> str:
    """The p-value to three decimals; `–` when not computed or NaN (no valid test)."""
    return MISSING if delta is None or math.isnan(delta.p) else f"{delta.p:.3f}"


def comparison_table(pairs: Sequence[PairedComparison], metrics: Sequence[str], caption: str) -> str:
    """`caption`, then a Markdown row per pair: method, baseline, n, then `Δ [low, high]` and p per metric (split
    into several tables where wider than a terminal, each Δ beside its p); legend lines for the pairs without a
    shared question (`empty_pairs_note`) and for undefined values, where there are any."""
    header = ["Method", "vs", "n"] + [cell for metric in metrics for cell in (f"Δ {metric}{arrow(metric)}", "p")]
    rows = [[pair.method.title, pair.baseline.title, str(pair.n)]
            + [cell for metric in metrics
               for cell in (delta_cell(metric, pair.deltas.get(metric)), p_cell(pair.deltas.get(metric)))]
            for pair in pairs]
    undefined = any(cell.startswith(NOT_DEFINED) for row in rows for cell in row)
    notes = filter(None, [empty_pairs_note(pairs), NOT_DEFINED_NOTE if undefined else ""])
    return "\n\n".join([caption, markdown_table(header, rows, keep=3, groups=[2] * len(metrics)), *notes])


def empty_pairs_note(pairs: Sequence[PairedComparison]) -> str:
    """Why a row is all `–`: n = 0, no question that quality control keeps for both methods (Tables 1 and 2 give
    each method's excluded questions, `n (excl.)`)."""
    empty = [f"{pair.method.title} vs {pair.baseline.title}" for pair in pairs if pair.n == 0]
    if not empty:
        return ""
    return (f"{MISSING} with n = 0 ({'; '.join(empty)}): quality control kept no question for both methods, so there "
            "is nothing to compare (n (excl.) in Tables 1 and 2 shows which method lost its questions).")


def metrics_markdown(label: str, pairs: Sequence[PairedComparison]) -> str:
    """The metric Δ table of one run."""
    caption = (f"**Paired differences, {label}.** Δ = method − baseline on the n questions quality control keeps "
               f"for both, with {100 * LEVEL:g}% paired bootstrap intervals and two-sided p-values ({P_RULE}); "
               f"{DAGGER}: no valid interval or p (Δ of the binned ECE: its bias differs between methods, "
               f"docs/statistics.md); ACC/AUC in points of %; {ARROWS_NOTE} (for the metric; Δ > 0 favours the method "
               "where ↑).")
    return comparison_table(pairs, METRIC_NAMES, caption)


def emd_markdown(pairs: Sequence[PairedComparison]) -> str:
    """The Δ EMD‾ table of `emd_comparisons` (empty when there is no pair)."""
    if not pairs:
        return ""
    caption = (f"**Paired Δ EMD‾.** Δ = mean over the n questions of the method's EMD‾ − the baseline's, with "
               f"{100 * LEVEL:g}% paired bootstrap intervals and two-sided p-values ({EMD_P_RULE}, the same rule "
               "at every n; negative: closer to a martingale than the baseline).")
    return comparison_table(pairs, list(pairs[0].deltas), caption)


def csv_rows(label: str, pairs: Sequence[PairedComparison], n_resamples: int) -> list[dict[str, Any]]:
    """One CSV row per pair × metric (fractions, as in metrics.csv)."""
    return [{"dataset": label, "method": pair.method.name, "baseline": pair.baseline.name, "metric": metric,
             "n": pair.n, "delta": repr(delta.delta), "low": repr(delta.low), "high": repr(delta.high),
             "p": repr(delta.p), "level": LEVEL, "n_resamples": n_resamples}
            for pair in pairs for metric, delta in pair.deltas.items()]


def write_paired(
    runs: Sequence[tuple[str, Path]], out: Path, qc: QualityControl | None = None, n_resamples: int = 1000
) -> tuple[list[str], list[Path]]:
    """For each (label, run directory): its stored rows' `paired_scores`. Writes paired.md and paired.csv into
    `out`; returns the Markdown tables (one per run with a pair) and the files."""
    blocks, buffer = [], io.StringIO()
    writer = csv.DictWriter(buffer, CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for label, run_dir in runs:
        with RunStore.open(Path(run_dir) / STORE_FILE, read_only=True) as store:
            pairs = paired_scores(store.rows(trajectories=False), qc, n_resamples)
        if pairs:
            blocks.append(metrics_markdown(label, pairs))
            writer.writerows(csv_rows(label, pairs, n_resamples))
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / PAIRED_MD, "\n\n".join(blocks or [f"No pairs: {BASELINE} is not among the methods."]) + "\n")
    write_atomic(out / PAIRED_CSV, buffer.getvalue())
    return blocks, [out / PAIRED_MD, out / PAIRED_CSV]
