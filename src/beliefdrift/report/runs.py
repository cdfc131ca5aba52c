"""A report over evaluation runs: score each run store (read-only), then write the method tables, reliability
diagrams and paired comparisons; the `report` command and `evaluate` both call `write_report`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from beliefdrift.data.lm_eval import is_task_spec, subtask_of
from beliefdrift.report.paired import write_paired
from beliefdrift.report.reliability import reliability_figures
from beliefdrift.report.tables import RunScores, dataset_title, markdown_tables, write_tables
from beliefdrift.runs.scoring import QualityControl, score_rows
from beliefdrift.runs.store import STORE_FILE, ResultRow, RunStore, StoreError


def model_name(config: dict) -> str:
    """The model a run's identity names: a served model's name on its server, else the --model spec."""
    return str(config.get("served_model") or config.get("model", ""))


def load_run(run_dir: Path, qc: QualityControl, n_resamples: int = 1000) -> tuple[RunScores, list[str]]:
    """A run directory's scores, headed by its dataset's name (marked partial when unfinished), and notes on what
    is missing from it: one column group, as bench/report.py times it (`load_runs` splits lm-eval groups)."""
    config, rows, label, notes = _read_run(run_dir)
    return RunScores(label, score_rows(rows, qc, n_resamples), model_name(config)), notes


def load_runs(run_dir: Path, qc: QualityControl, n_resamples: int = 1000) -> tuple[str, list[RunScores], list[str]]:
    """(the run's label, its column groups, notes): as `load_run`, but a run of an lm-eval group is one column group
    per subtask, headed by the subtask's name."""
    config, rows, label, notes = _read_run(run_dir)
    model = model_name(config)
    tasks = sorted({subtask_of(row.question_id) for row in rows}) if is_task_spec(str(config.get("dataset"))) else []
    if len(tasks) < 2:
        return label, [RunScores(label, score_rows(rows, qc, n_resamples), model)], notes
    partial = label[label.index(" (partial") :] if " (partial" in label else ""
    return label, [RunScores(task + partial, score_rows([r for r in rows if subtask_of(r.question_id) == task], qc,
                                                        n_resamples), model) for task in tasks], notes


def _read_run(run_dir: Path) -> tuple[dict[str, Any], list[ResultRow], str, list[str]]:
    """(identity, result rows, column label, notes) of a run directory."""
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
    return config, rows, label, notes


#: What `write_report` writes, as the commands' last message names it.
REPORT_FILES = "tables.md, tables.tex, metrics.csv, paired.md/csv, reliability diagrams"


def write_report(
    run_dirs: Sequence[Path], out: Path, qc: QualityControl | None = None, n_resamples: int = 1000,
    figure_formats: Sequence[str] = ("png",),
) -> tuple[str, list[Path]]:
    """Score every run, write tables and reliability diagrams into `out`; return (Markdown tables preceded by notes
    on partial runs and skipped questions, files)."""
    qc = qc or QualityControl()
    loaded = [load_runs(run_dir, qc, n_resamples) for run_dir in run_dirs]
    notes = [note for _, _, run_notes in loaded for note in run_notes]
    labels = [run.label.lower() for _, columns, _ in loaded for run in columns]  # the figures' names are lowercase
    runs = [run if labels.count(run.label.lower()) == 1
            else RunScores(f"{run.label} ({Path(run_dir).name})", run.scores, run.model)
            for (_, columns, _), run_dir in zip(loaded, run_dirs, strict=True) for run in columns]
    titles = [label for label, _, _ in loaded]
    titles = [title if titles.count(title) == 1 else f"{title} ({Path(d).name})"
              for title, d in zip(titles, run_dirs, strict=True)]
    paired, paired_files = write_paired(list(zip(titles, run_dirs, strict=True)), out, qc, n_resamples)
    files = write_tables(runs, out) + reliability_figures(runs, out, figure_formats) + paired_files
    return "\n\n".join([*notes, markdown_tables(runs), *paired]), files
