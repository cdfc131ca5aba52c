"""The paper's result tables from scored runs: Markdown, LaTeX (booktabs) and a CSV with every number.

Table 1: ACC / AUC in percent per method, Table 2: ECE / CE2 / NLL / BS, one column group per run (dataset),
rows in the paper's order (PPR + NoSEED, PPR + SEED_m…, AM-PPR…, Direct-Query); the columns, their ↑/↓ and which
have an interval are the metric registry's (`metrics.REPORT_METRICS`). A cell carries its 95% bootstrap interval,
e.g. `62.3 [55.1, 69.0]`, where the scores have one; a figure without one (NaN bounds, `metrics.valid_only`) is
marked †: the paper's binned ECE (its plug-in is biased upward, its percentile interval covers the truth in well
under 95% of simulated datasets at n ≤ 200) and CE2 below `CE2_MIN_N` (20) questions. Both tables give the questions
scored and those excluded by quality control. Alternative estimators (q*_RB, θ̂_1) appear in the CSV only.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from beliefdrift.data.lm_eval import is_task_spec, task_label
from beliefdrift.data.question import MCQuestion
from beliefdrift.engine.methods import Method, MethodResult
from beliefdrift.files import write_atomic
from beliefdrift.metrics.functional import NLL_EPS, REPORT_METRICS
from beliefdrift.registry import table_order
from beliefdrift.report.text import fixed, markdown_cell, markdown_table
from beliefdrift.runs.scoring import SCORE_METRICS, MethodScore, QualityControl, ScoreRow, score_results

DATASET_TITLES = {"demo": "Demo", "csqa": "CSQA", "arc": "AI2-ARC", "tinymmlu": "TinyMMLU", "mmlu": "MMLU",
                  "gpqa": "GPQA"}


def _table_metrics(table: int) -> tuple[str, ...]:
    """The metrics of `REPORT_METRICS` in report table `table`, in their order."""
    return tuple(spec.name for spec in REPORT_METRICS.values() if spec.table == table)


#: (name, metrics, caption, with the questions-scored column): a metric's table is its `MetricSpec.table`
TABLES = (
    ("Table 1", _table_metrics(1), "Accuracy and AUC (%)", True),
    ("Table 2", _table_metrics(2), "ECE (the paper's binned plug-in, no interval), CE2 (debiased L2 "
     "calibration error), NLL and Brier score", True),
)
DAGGER, LATEX_DAGGER = "†", r"$^\dagger$"
COUNT_HEADER = "n (excl.)"
MISSING = "–"
#: The tables' legend of ↑/↓ and of the empty cell.
ARROWS_NOTE = "↑/↓: higher/lower is better"
MISSING_NOTE = f"{MISSING}: no question scored (quality control excluded all of the method's questions)"
#: A metric undefined on the questions scored, and the legend that says so.
NOT_DEFINED = "n/a"
NOT_DEFINED_NOTE = f"{NOT_DEFINED}: undefined here (AUC when every prediction is right, or every one wrong)"


def arrow(metric: str, latex: bool = False) -> str:
    """↑ or ↓ after a metric's name as its `MetricSpec.higher_is_better` says; nothing for a name outside the
    registry (EMD‾)."""
    spec = REPORT_METRICS.get(metric)
    if spec is None:
        return ""
    if latex:
        return r" $\uparrow$" if spec.higher_is_better else r" $\downarrow$"
    return " ↑" if spec.higher_is_better else " ↓"


@dataclass(frozen=True)
class RunScores:
    """One column group: a run's method scores under a heading (usually the dataset's name)."""

    label: str
    scores: Sequence[MethodScore]
    model: str = ""

    def main(self) -> dict[str, MethodScore]:
        """The methods' own estimates by method name (alternative estimators left out)."""
        return {s.method.name: s for s in self.scores if s.estimator is None}


def dataset_title(dataset: str) -> str:
    """A dataset's column heading: its paper name, an lm-eval task's name, a file's stem."""
    if is_task_spec(dataset):
        return task_label(dataset)
    return DATASET_TITLES.get(dataset, Path(dataset).stem)


def format_value(metric: str, value: float) -> str:
    """ACC/AUC in percent with one decimal, the others with four (as in the paper), rounded once by `text.fixed`
    (the explorer rounds the same way); `NOT_DEFINED` for NaN."""
    if math.isnan(value):
        return NOT_DEFINED
    percent = metric in REPORT_METRICS and REPORT_METRICS[metric].percent  # other names (EMD‾): as numbers
    return fixed(100 * value, 1) if percent else fixed(value, 4)


def format_cell(score: MethodScore | None, metric: str, latex: bool = False) -> str:
    """`point [low, high]`; `point †` where the scores have no valid interval (NaN bounds: `metrics.valid_only`);
    `–` when the method is absent or QC excluded every question."""
    if score is None or score.summary is None:
        return MISSING if not latex else "--"
    point, low, high = score.summary[metric]
    text = format_value(metric, point)
    if math.isnan(point):
        return text
    if math.isnan(low) or math.isnan(high):
        return text + (LATEX_DAGGER if latex else f" {DAGGER}") + clipped_mark(score, metric)
    interval = f"[{format_value(metric, low)}, {format_value(metric, high)}]"
    return (f"{text} {{\\scriptsize {interval}}}" if latex else f"{text} {interval}") + clipped_mark(score, metric)


def clipped_mark(score: MethodScore, metric: str) -> str:
    """` (k clipped)` after an NLL where k true-label probabilities were below ε and counted as ε (`nll_clipped`):
    each adds −log ε ≈ 13.8 to the sum, so a few can dominate the mean."""
    clipped = score.summary["nll_clipped"] if metric == "NLL" and score.summary else 0
    return f" ({clipped} clipped)" if clipped else ""


#: The caption's note on `clipped_mark`.
CLIPPED_NOTE = (f"(k clipped): k true-label probabilities below ε = {NLL_EPS:g} counted as ε, each adding −log ε ≈ "
                f"{-math.log(NLL_EPS):.1f} to the NLL's sum")


def format_count(score: MethodScore | None) -> str:
    return MISSING if score is None else f"{score.n} ({score.excluded})"


def method_rows(runs: Sequence[RunScores]) -> list[Method]:
    """Every method present in any run, in table order."""
    methods = {s.method.name: s.method for run in runs for s in run.scores}
    return sorted(methods.values(), key=table_order)


def markdown_tables(runs: Sequence[RunScores]) -> str:
    """Tables 1 and 2 as Markdown (columns `<dataset> <metric> ↑/↓`), each split where wider than a terminal
    (`text.markdown_table`), with a caption that explains every mark in it once."""
    blocks = []
    for name, metrics, caption, counted in TABLES:
        columns = (*[f"{metric}{arrow(metric)}" for metric in metrics], *[COUNT_HEADER] * counted)
        header = ["Method"] + [f"{markdown_cell(run.label)} {c}" for run in runs for c in columns]
        rows = []
        for method in method_rows(runs):
            cells = [method.title]
            for run in runs:
                score = run.main().get(method.name)
                cells += [format_cell(score, m) for m in metrics] + ([format_count(score)] if counted else [])
            rows.append(cells)
        notes = [f"{caption} with 95% bootstrap intervals",
                 *(["n (excl.): questions scored (removed by quality control)"] if counted else []),
                 f"{DAGGER}: no valid interval at this n (docs/statistics.md)", ARROWS_NOTE,
                 *([MISSING_NOTE] if any(MISSING in row for row in rows) else []),
                 *([NOT_DEFINED_NOTE] if any(cell.startswith(NOT_DEFINED) for row in rows for cell in row) else []),
                 *([CLIPPED_NOTE] if any("clipped)" in cell for row in rows for cell in row) else [])]
        blocks.append(f"**{name}.** " + "; ".join(notes) + ".\n\n"
                      + markdown_table(header, rows))
    return "\n\n".join(blocks) + "\n"


#: LaTeX's special characters in text (a file-derived label such as a data file's name) and how each is written.
LATEX_SPECIAL = {"\\": r"\textbackslash{}", "^": r"\textasciicircum{}", "~": r"\textasciitilde{}",
                 **{c: "\\" + c for c in "&%$#_{}"}}


def latex_escape(text: str) -> str:
    return "".join(LATEX_SPECIAL.get(c, c) for c in text)


def latex_method(method: Method) -> str:
    """The paper's row label, e.g. `PPR + $\\texttt{SEED}_5$`."""
    if not method.resamples:
        return rf"\texttt{{{method.spec.title}}}"
    seeds = rf"$\texttt{{SEED}}_{{{method.num_seeds}}}$" if method.num_seeds else r"\texttt{NoSEED}"
    return f"{method.spec.title} + {seeds}"


def latex_tables(runs: Sequence[RunScores]) -> str:
    """Tables 1 and 2 as LaTeX (needs \\usepackage{booktabs, multirow}), laid out like the paper's."""
    datasets = ", ".join(latex_escape(run.label) for run in runs)
    models = ", ".join(sorted({latex_escape(Path(run.model).name) for run in runs if run.model}))
    blocks = []
    for number, (_, metrics, caption, counted) in enumerate(TABLES, start=1):
        columns = [*metrics, *[COUNT_HEADER] * counted]
        width = len(columns)
        groups = " &\n".join(rf"\multicolumn{{{width}}}{{c}}{{\textbf{{{latex_escape(run.label)}}}}}"
                             for run in runs)
        rules = "".join(rf"\cmidrule(lr){{{2 + i * width}-{1 + (i + 1) * width}}}" for i in range(len(runs)))
        heads = " & ".join(rf"\textbf{{{latex_escape(c)}}}{arrow(c, latex=True)}" for _ in runs for c in columns)
        lines = [
            r"\begin{table*}[t]",
            rf"\caption{{{latex_escape(caption)} on {datasets}" + (f" inferred by {models}" if models else "")
            + r" (95\% bootstrap intervals)}",
            rf"\label{{tab:beliefdrift-{number}}}",
            r"\centering",
            r"\small",
            r"\begin{tabular}{l " + " ".join("c" * width for _ in runs) + "}",
            r"\toprule",
            r"\multicolumn{1}{c}{\multirow{2}{*}{\textbf{Method}}} &",
            groups + r" \\",
            rules,
            f" & {heads} \\\\",
        ]
        previous = None
        for method in method_rows(runs):
            if method.kind != previous:
                lines.append(r"\midrule")
                previous = method.kind
            cells = [latex_method(method)]
            for run in runs:
                score = run.main().get(method.name)
                cells += [format_cell(score, m, latex=True) for m in metrics]
                cells += [format_count(score).replace(MISSING, "--")] * counted
            lines.append(" & ".join(cells) + r" \\")
        lines += [r"\bottomrule", r"\end{tabular}", r"\end{table*}"]
        blocks.append("\n".join(lines))
    return "% requires \\usepackage{booktabs,multirow}\n" + "\n\n".join(blocks) + "\n"


CSV_COLUMNS = ["dataset", "model", "method", "estimator", "title", "n", "excluded", "total", "nll_clipped",
               *(f"{m}{suffix}" for m in SCORE_METRICS for suffix in ("", "_low", "_high")),
               "label_mass", "confidence", "predicted"]


def score_fields(row: ScoreRow) -> dict[str, Any]:
    """A `ScoreRow` as the columns of metrics.csv: counts, each metric (a fraction) and its bounds as `<metric>`,
    `<metric>_low`, `<metric>_high`, the mean label mass, the mean confidence and the argmax counts per option."""
    fields: dict[str, Any] = {"method": row.method, "estimator": row.estimator, "title": row.title, "n": row.n,
                              "excluded": row.excluded, "total": row.total, "label_mass": row.label_mass,
                              "confidence": row.confidence, "predicted": row.predicted}
    if row.nll_clipped is not None:
        fields["nll_clipped"] = row.nll_clipped
    for metric, interval in row.metrics.items():
        fields |= dict(zip((metric, f"{metric}_low", f"{metric}_high"), interval, strict=True))
    return fields


def csv_table(runs: Sequence[RunScores]) -> str:
    """Every method and estimator of every run (`score_fields`, floats written exactly)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for run in runs:
        for score in run.scores:
            fields = {key: repr(value) if isinstance(value, float) else value
                      for key, value in score_fields(score.row()).items()}
            writer.writerow({"dataset": run.label, "model": run.model, **fields})
    return buffer.getvalue()


def write_tables(runs: Sequence[RunScores], out: Path) -> list[Path]:
    """Write tables.md, tables.tex and metrics.csv into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for filename, text in (("tables.md", markdown_tables(runs)), ("tables.tex", latex_tables(runs)),
                           ("metrics.csv", csv_table(runs))):
        write_atomic(out / filename, text)
        written.append(out / filename)
    return written


def metric_table(
    results: Mapping[str, Sequence[MethodResult]],
    questions: Sequence[MCQuestion],
    label: str = "Demo",
    qc: QualityControl | None = None,
    n_resamples: int = 1000,
) -> str:
    """Markdown Tables 1 and 2 for in-memory results ({method name: one MethodResult per question})."""
    return markdown_tables([RunScores(label, score_results(results, questions, qc, n_resamples))])
