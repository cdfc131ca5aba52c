"""Summaries and figures of the diagnostics commands from their stored records: `drift` (marginal drift and the
c.i.d. check, paper Figure 1) and `emd` (EMD‾ and EMD_k(b) with their noise floors, paper Figure 3).

`records[method name][i]` is the record of `questions[i]`. Each function returns the summary (JSON-ready), the
Markdown table and the figure files it wrote; the commands write the text files.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from textwrap import shorten
from typing import Any

from beliefdrift.config.diagnostics import EMDCommandConfig
from beliefdrift.data.question import MCQuestion
from beliefdrift.diagnostics.cid import CID_ALPHA
from beliefdrift.diagnostics.drift_test import DRIFT_LEVEL, DriftTest
from beliefdrift.diagnostics.emd import EMDRow, aggregate_emd
from beliefdrift.diagnostics.noise_floor import method_floors, missing_fields, with_floor
from beliefdrift.diagnostics.trajectory import cid_summary
from beliefdrift.engine.methods import Method
from beliefdrift.files import safe_name, write_atomic
from beliefdrift.metrics.stats import mean_std
from beliefdrift.report.diagnostic_plots import DISTANCE_LABELS, plot_curves, plot_emd_bars, plot_emd_burn_in
from beliefdrift.report.marginal import plot_average_drift, record_drift
from beliefdrift.report.paired import emd_comparisons, emd_markdown
from beliefdrift.report.plots import plot_marginal_drift
from beliefdrift.report.text import fixed, markdown_table, plus_minus
from beliefdrift.runs.diagnostics import Diagnosed

Records = Mapping[str, Sequence[Mapping[str, Any]]]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DiagnosticsReport:
    """What a diagnostics command writes: summary.json's content, summary.md's table, the figure files."""

    summary: dict[str, Any]
    table: str
    figures: list[Path]


#: The caption of the c.i.d. columns (`diagnostics.cid`).
CID_NOTE = ("c.i.d. ‖D̄‖₁: first-half minus second-half answer frequencies of each path, averaged over paths, mean ± "
            "std over questions (descriptive); c.i.d. rejected: questions whose paths' last answers do not follow "
            f"their first predictive θ_0 (Monte Carlo p ≤ {CID_ALPHA:g}, valid for every c.i.d. process); "
            f"(n untestable): questions whose paths could give no p ≤ {CID_ALPHA:g} whatever their last answers")


def _cid_cell(cid: Mapping[str, Any]) -> str:
    """`rejected/questions`, then `(n untestable)` where some questions could not be rejected."""
    untestable = f" ({cid['cid_untestable']} untestable)" if cid["cid_untestable"] else ""
    return f"{cid['cid_rejected']}/{cid['questions']}{untestable}"


def _warn_untestable(method: Method, cid: Mapping[str, Any]) -> None:
    """One warning line where the c.i.d. check could not reject some of a method's questions."""
    if cid["cid_untestable"]:
        log.warning("%s: the c.i.d. check cannot reject %d of %d questions at %g whatever their last answers (their "
                    "smallest attainable p is larger: more paths, -J, make it testable)", method.title,
                    cid["cid_untestable"], cid["questions"], CID_ALPHA)


def drift_report(
    questions: Sequence[MCQuestion], methods: Sequence[Method], records: Records, out: Path, dataset: str,
    plot_questions: int,
) -> DiagnosticsReport:
    """Per method: ‖E[θ_N] − E[θ_0]‖₁ and the c.i.d. statistic (mean ± sample std over questions) and how many
    questions reject c.i.d.; figures of the shift against n, of E[θ_n] averaged over questions, and of the first
    `plot_questions` questions' marginal drift, written under `out` (`marginal_drift_<safe_name(question id)>`)."""
    summary, rows = {}, []
    for method in methods:
        shift_mean, shift_std = mean_std([r["marginal_shift"] for r in records[method.name]], ddof=1)
        summary[method.name] = {"marginal_shift_mean": shift_mean.tolist(), "marginal_shift_std": shift_std.tolist(),
                                **cid_summary(records[method.name])}
        s = summary[method.name]
        _warn_untestable(method, s)
        rows.append([method.title, str(len(questions)), plus_minus(shift_mean[-1], shift_std[-1]),
                     plus_minus(s["cid_l1_mean"], s["cid_l1_std"]), _cid_cell(s)])
    table = (f"**Marginal drift and c.i.d. check, {dataset}.** ‖E[θ_N] − E[θ_0]‖₁: how far the mean over paths of the "
             "answer distribution θ_n moved from before the first answer (n = 0) to after the last (n = N), L1, mean ± "
             f"std over questions (a martingale keeps E[θ_n] constant); {CID_NOTE}.\n\n"
             + markdown_table(["method", "questions", "‖E[θ_N] − E[θ_0]‖₁", "c.i.d. ‖D̄‖₁", "c.i.d. rejected"], rows))

    figures = plot_curves([(m.title, summary[m.name]["marginal_shift_mean"], summary[m.name]["marginal_shift_std"])
                           for m in methods], "n (answers generated)", r"$\|E[\theta_n] - E[\theta_0]\|_1$",
                          out / "marginal_shift", title=f"{dataset}: mean ± std over questions")
    figures += plot_average_drift(questions, methods, records, out / "marginal_drift", dataset)
    for i, question in enumerate(questions[:plot_questions]):
        panels = [(m.title, record_drift(records[m.name][i])) for m in methods]
        figures += plot_marginal_drift(panels, question.labels, out / f"marginal_drift_{safe_name(question.id)}",
                                       title=f"{question.id}: {shorten(question.stem, 80, placeholder=' …')}")
    return DiagnosticsReport(summary, table, figures)


def emd_report(
    questions: Sequence[MCQuestion],
    methods: Sequence[Method],
    records: Records,
    floors: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]],
    distances: Sequence[str],
    horizon: int,
    lookahead: int,
    burn_in: int,
    out: Path,
    dataset: str,
) -> DiagnosticsReport:
    """Per distance a titled table: per method EMD‾ (k = 2 … `horizon`) and EMD_`lookahead`(b) at b = 0 and
    b = `burn_in`, each beside its Pólya-urn floor when `floors` has the method's urn replicates and the predictives
    were Monte Carlo; then the drift test of each figure (`drift_test`, when the records store the unbiased drift),
    the c.i.d. check, and each method's paired Δ EMD‾ against PPR; every table fits `text.WIDTH` columns (split,
    a figure beside its floor). Bar and burn-in figures per distance, written under `out`."""
    summary: dict[str, Any] = {}
    points = [0, burn_in] if burn_in else [0]
    exact = {m.name: all(r["kstep_exact"] for r in records[m.name]) for m in methods}
    figures: list[Path] = []
    replicates = len(next(iter(floors.values()))) if floors else 0
    blocks = [f"**Expected martingale drift, {dataset}.** {_emd_legend(horizon, lookahead, burn_in, replicates)}"]
    for distance in distances:
        emd_rows = [aggregate_emd(m.title, records[m.name], distance) for m in methods]
        if floors:  # exact predictives have no noise: no floor (it would be 0 [0, 0] with p = 1/(R + 1))
            emd_rows = [row if exact[m.name] else with_floor(row, records[m.name], floors[m.name])
                        for m, row in zip(methods, emd_rows, strict=True)]
        floor = any(row.floor_replicates for row in emd_rows)
        label = DISTANCE_LABELS[distance]
        header = ["method", "questions", f"EMD‾ ({label})", *(["urn floor [95%]", "> urn floor (p)"] if floor else [])]
        for b in points:
            header += [f"EMD_{lookahead}({b}) ({label})", *(["urn floor [95%]"] if floor else [])]
        rows = [[m.title, str(len(questions)), *_emd_cells(row, points, floor)]
                for m, row in zip(methods, emd_rows, strict=True)]
        groups = [3 if floor else 1, *[2 if floor else 1] * len(points)]
        blocks.append(f"**EMD, {label} distance.**\n\n" + markdown_table(header, rows, keep=2, groups=groups))
        for method, row in zip(methods, emd_rows, strict=True):
            summary.setdefault(method.name, {})[distance] = asdict(row)
        figures += plot_emd_bars({dataset: emd_rows}, out / f"emd_bar_{distance}", title=f"K = {horizon}")
        figures += plot_emd_burn_in(emd_rows, lookahead, out / f"emd_k_b_{distance}", title=dataset)
    drift_rows, cid_rows = [], []
    for method, row in zip(methods, emd_rows, strict=True):
        stored = [row.drift, *(row.burn_in_drift[b] for b in points)] if row.burn_in_drift else None
        tests = stored or [None] * (len(points) + 1)
        drift_rows.append([method.title, *map(_drift_cell, tests)])
        cid = cid_summary(records[method.name])
        _warn_untestable(method, cid)
        summary[method.name]["cid"] = cid
        summary[method.name]["kstep_exact"] = all(r["kstep_exact"] for r in records[method.name])
        summary[method.name]["prefixes_exact"] = all(r["prefixes_exact"] for r in records[method.name])
        cid_rows.append([method.title, f"{cid['cid_l1_mean']:.3f} ± {cid['cid_l1_std']:.3f}",
                         _cid_cell(cid)])
    blocks.append(f"**Drift test.** drift Û: mean ± s.e. over questions of the "
                  "unbiased ‖p^(k) − p^(1)‖₂² (×10³; 0 in expectation for every martingale), p of the betting test "
                  "over the rollouts of every question (size ≤ its level for every martingale), * where p < "
                  f"{DRIFT_LEVEL}; exact: enumerated, no noise, no p; —: records stored before it.\n\n"
                  + markdown_table(["method", "drift Û, EMD‾ (p)", *(f"drift Û, b = {b} (p)" for b in points)],
                                   drift_rows))
    blocks.append(f"**c.i.d. check.** {CID_NOTE}.\n\n"
                  + markdown_table(["method", "c.i.d. ‖D̄‖₁", "c.i.d. rejected"], cid_rows))
    paired = emd_markdown(emd_comparisons(records, distances))
    table = "\n\n".join(blocks + ([paired] if paired else []))
    return DiagnosticsReport(summary, table, figures)


def write_emd_report(settings: EMDCommandConfig, run: Diagnosed) -> DiagnosticsReport:
    """`emd_report` of a stored emd run (with the noise floors of `settings.noise_floor_replicates`, none where the
    records predate them), its summary.md and summary.json written into `settings.out` (rank 0's part of `emd`)."""
    questions, methods, records = run.questions, run.methods, run.method_records()
    missing = missing_fields([r for m in methods for r in records[m.name]])
    if settings.noise_floor_replicates and missing:
        log.warning("no noise floor: records stored before it existed lack %s (new --out for one)",
                    ", ".join(missing))
    floors = method_floors(questions, methods, records, seed=settings.seed, config=settings.emd,
                           replicates=settings.noise_floor_replicates, distances=settings.distance,
                           ) if settings.noise_floor_replicates and not missing else {}
    report = emd_report(questions, methods, records, floors, settings.distance, settings.horizon,
                        settings.lookahead, settings.burn_in, settings.out, settings.dataset)
    write_atomic(settings.out / "summary.md", report.table + "\n")
    write_atomic(settings.out / "summary.json", json.dumps(report.summary, indent=2) + "\n")
    return report


def _emd_legend(horizon: int, lookahead: int, burn_in: int, replicates: int) -> str:
    """What the EMD tables' columns mean, said once (the urn floor's where `replicates` of it were drawn)."""
    floor = ("urn floor [95%] (a reference, valid for urns only): mean [2.5%, 97.5%] of the same figure for "
             f"{replicates} replicates of Pólya-urn martingales matched to each question's θ and spread, through the "
             "same estimator; > urn floor (p): yes where the one-sided Monte Carlo p ≤ 0.025 (the figure then also "
             "lies above the 97.5% point), and how many questions pass the same test against their own floor; ")
    return (f"EMD‾: the distance d(p^(k)_n, p^(1)_n) between the k-step and the one-step predictive averaged over "
            f"k = 2 … {horizon} (-K) and the prefixes n (--prefix-lengths), mean ± std over questions (0 for a "
            f"martingale); EMD_{lookahead}(b): the same at k = {lookahead} (-k) after a prefix of b answers sampled "
            f"from the process (b = 0 and b = {burn_in}, --burn-in; sampled on their own, whatever the c.i.d. paths' "
            "-N). "
            + (floor if replicates else "")
            + "exact: the predictives were enumerated, so there is no noise, no floor and no p.")


def _emd_cells(row: EMDRow, points: list[int], floor_columns: bool) -> list[str]:
    """EMD‾ and EMD_k(b) at the burn-in `points` as mean ± std, each followed by its floor when `floor_columns`
    (`exact` where the row has none because its predictives were enumerated)."""
    band, curve_band = row.floor_band, row.burn_in_floor_band
    none = "exact" if floor_columns and band is None else None
    cells = [plus_minus(row.emd_bar, row.emd_bar_std, 4)]
    if band is not None:
        floor, low, high = band
        cells += [f"{fixed(floor)} [{fixed(low)}, {fixed(high)}]",
                  f"{'yes' if row.above_floor else 'no'} ({row.floor_p:.3f}); {row.questions_above_floor}/"
                  f"{row.questions} questions"]
    cells += [none, none] if none else []
    for b in points:
        cells.append(plus_minus(row.burn_in[b], row.burn_in_std[b], 4))
        if curve_band is not None:
            floors, lows, highs = curve_band
            cells.append(f"{fixed(floors[b])} [{fixed(lows[b])}, {fixed(highs[b])}]")
        cells += [none] if none else []
    return cells


def _drift_cell(test: DriftTest | None) -> str:
    """`estimate ± s.e. (p)` ×10³ with * when flagged; `exact estimate` without p; — without a test."""
    if test is None:
        return "—"
    if test.exact or test.p is None:
        return f"{'exact ' if test.exact else ''}{1e3 * test.estimate:.3f}"
    return f"{1e3 * test.estimate:.3f} ± {1e3 * (test.se or 0.0):.3f} ({test.p:.3f}){' *' if test.drifts else ''}"
