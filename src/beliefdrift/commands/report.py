"""`beliefdrift report RUN_DIR [RUN_DIR …]`: the paper's tables and reliability diagrams from run stores.

Writes tables.md, tables.tex (Table 1: ACC/AUC, Table 2: ECE/NLL/BS; one column group per run),
metrics.csv (every method and estimator with intervals, n, excluded, nll_clipped), one reliability
diagram per method, and paired.md / paired.csv (each method's Δ against PPR, `report.paired`). Questions failing
quality control are excluded per method and counted. Stores are opened read-only; an unfinished run is reported
as partial (results stored of planned) in every table's heading and on stdout, and questions skipped for a prompt
longer than the model's context are counted.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from beliefdrift.report.paired import write_paired
from beliefdrift.report.plots import FIGURE_FORMATS
from beliefdrift.report.reliability import reliability_figures
from beliefdrift.report.tables import RunScores, dataset_title, markdown_tables, write_tables
from beliefdrift.scoring import QualityControl, score_rows
from beliefdrift.store import STORE_FILE, RunStore, StoreError


def add_report_args(parser: argparse.ArgumentParser) -> None:
    """Quality-control thresholds and the bootstrap size."""
    group = parser.add_argument_group("report")
    qc = QualityControl()
    group.add_argument("--qc-path-mass", type=float, default=qc.path_mass,
                       help=f"a path is off-format when its mean valid_mass is below this (default {qc.path_mass})")
    group.add_argument("--qc-max-fraction", type=float, default=qc.max_fraction,
                       help="exclude a question when more than this fraction of its paths is off-format "
                            f"(default {qc.max_fraction})")
    group.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the 95%% intervals")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="tables and reliability diagrams from evaluation runs",
                                   description=__doc__)
    parser.add_argument("runs", nargs="+", type=Path, help="run directories (each holding run.sqlite)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory (default: the run directory; beliefdrift-out/report for several)")
    parser.add_argument("--figure-formats", type=figure_formats, default=("png",), metavar="png[,pdf]",
                        help="formats of the reliability diagrams (default png; png,pdf adds a PDF of each)")
    add_report_args(parser)
    parser.set_defaults(func=run)


def figure_formats(text: str) -> tuple[str, ...]:
    """`png,pdf` → ("png", "pdf")."""
    formats = tuple(dict.fromkeys(part.strip().lower() for part in text.split(",") if part.strip()))
    if not formats or set(formats) - set(FIGURE_FORMATS):
        raise argparse.ArgumentTypeError(f"{text!r}: give {' and/or '.join(FIGURE_FORMATS)}, comma-separated")
    return formats


def load_run(run_dir: Path, qc: QualityControl, n_resamples: int = 1000) -> tuple[RunScores, list[str]]:
    """A run directory's scores, headed by its dataset's name (marked partial when unfinished), and notes on what
    is missing from it."""
    with RunStore.open(Path(run_dir) / STORE_FILE, read_only=True) as store:
        config, rows = store.config(), store.rows(trajectories=False)
    if not rows:
        raise StoreError(f"{run_dir}: the run store holds no results yet")
    label, notes = dataset_title(str(config.get("dataset", run_dir))), []
    planned = config.get("questions", 0) * len(config.get("methods", []))
    if len(rows) < planned:
        label += f" (partial: {len(rows)} of {planned})"
        notes.append(f"note: {run_dir} is partial: {len(rows)} of {planned} question × method results stored; "
                     "run its evaluate command again to finish it")
    skipped = config.get("skipped_long_prompts", [])
    if skipped:
        notes.append(f"note: {run_dir}: {len(skipped)} questions skipped, prompt longer than the model's context "
                     f"({', '.join(skipped)})")
    return RunScores(label, score_rows(rows, qc, n_resamples), str(config.get("model", ""))), notes


def write_report(
    run_dirs: Sequence[Path], out: Path, qc: QualityControl | None = None, n_resamples: int = 1000,
    figure_formats: Sequence[str] = ("png",),
) -> tuple[str, list[Path]]:
    """Score every run, write tables and reliability diagrams into `out`; return (Markdown tables preceded by notes
    on partial runs and skipped questions, files)."""
    qc = qc or QualityControl()
    loaded = [load_run(run_dir, qc, n_resamples) for run_dir in run_dirs]
    runs, notes = [run for run, _ in loaded], [note for _, run_notes in loaded for note in run_notes]
    labels = [run.label for run in runs]
    runs = [run if labels.count(run.label) == 1 else RunScores(f"{run.label} ({Path(run_dir).name})", run.scores,
                                                               run.model)
            for run, run_dir in zip(runs, run_dirs, strict=True)]
    paired, paired_files = write_paired([(run.label, d) for run, d in zip(runs, run_dirs, strict=True)], out, qc,
                                        n_resamples)
    files = write_tables(runs, out) + reliability_figures(runs, out, figure_formats) + paired_files
    return "\n\n".join([*notes, markdown_tables(runs), *paired]), files


def run(args: argparse.Namespace) -> int:
    out = args.out or (args.runs[0] if len(args.runs) == 1 else Path("beliefdrift-out/report"))
    qc = QualityControl(args.qc_path_mass, args.qc_max_fraction)
    markdown, files = write_report(args.runs, out, qc, args.bootstrap, args.figure_formats)
    print(markdown)
    print(f"wrote {len(files)} files to {out} (tables.md, tables.tex, metrics.csv, paired.md/csv, reliability plots)")
    return 0
