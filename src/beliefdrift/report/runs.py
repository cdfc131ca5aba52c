"""A report over evaluation runs: score each run store (read-only), then write the method tables, reliability
diagrams and paired comparisons; the `report` command and `evaluate` both call `write_report`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from beliefdrift.report.paired import write_paired
from beliefdrift.report.reliability import reliability_figures
from beliefdrift.report.tables import RunScores, dataset_title, markdown_tables, write_tables
from beliefdrift.scoring import QualityControl, score_rows
from beliefdrift.store import STORE_FILE, RunStore, StoreError


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
    labels = [run.label.lower() for run in runs]  # case-insensitively: the figures' file names are lowercase
    runs = [run if labels.count(run.label.lower()) == 1
            else RunScores(f"{run.label} ({Path(run_dir).name})", run.scores, run.model)
            for run, run_dir in zip(runs, run_dirs, strict=True)]
    paired, paired_files = write_paired([(run.label, d) for run, d in zip(runs, run_dirs, strict=True)], out, qc,
                                        n_resamples)
    files = write_tables(runs, out) + reliability_figures(runs, out, figure_formats) + paired_files
    return "\n\n".join([*notes, markdown_tables(runs), *paired]), files
