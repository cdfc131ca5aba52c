"""Results you can hold: a run directory (finished or partial) as plain Python objects, and its export.

```python
run = bd.evaluate(questions="demo", n=2, paths=4, steps=5, methods=["direct", "ppr"])
run.scores()[0].metrics["ACC"].point, len(run.records()), run.path
bd.emd(questions=bd.load_dataset("demo", n=2), lm=lm).emd_rows()[0].emd_bar  # EMD‾ over questions
bd.open_run("beliefdrift-out/emd").records()[0]["emd_bar_l1"]  # any command's store: drift, emd, reasoning
```

`evaluate`, `drift`, `emd` and `reasoning` run (or resume) a command's units through the run loop, as the command
does, and return its `Run`. Each takes the same keywords (`runs.inputs`): `questions=` (a list of questions, a dataset
name or a file), `lm=` (a loaded model or what `--model` takes), `config=` (the command's settings dataclass, or a
YAML file or preset as `--config` takes) and the settings by the names of the command's flags (`paths=`, `steps=`,
`methods=`, `out=`, …), which override `config`. The command's report files (tables, summaries, figures) are the
CLI's to write, except reasoning's summary.json and figure, which its experiment writes.

One row per question × method: `records()` (what `beliefdrift export` writes), `trajectories()` (the paths'
answers, seeds and θ_n as numpy arrays); `scores()` is one `ScoreRow` per method and estimator, quality control and
bootstrap intervals applied as in the report's tables (metrics.csv); `paired()` each method against its baseline
(`PairedComparison`s, paired.md); `emd_rows()` an emd run's `EMDRow`s with their drift tests; `quality_control()`
what quality control drops.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beliefdrift.config.options import QualityControl
from beliefdrift.errors import UserError
from beliefdrift.files import check_directory, replacing
from beliefdrift.runs.inputs import run_inputs
from beliefdrift.runs.store import STORE_FILE, ResultRow, RunStore, StoreError

if TYPE_CHECKING:
    from beliefdrift.config.diagnostics import DriftConfig, EMDCommandConfig
    from beliefdrift.config.evaluate import EvalConfig
    from beliefdrift.config.reasoning import ReasoningCommandConfig
    from beliefdrift.diagnostics.emd import EMDRow
    from beliefdrift.runs.inputs import Model, Questions
    from beliefdrift.runs.paired import PairedComparison
    from beliefdrift.runs.scoring import QualityReport, ScoreRow

#: `beliefdrift export --format` values.
EXPORT_FORMATS = ("jsonl", "csv", "parquet")
#: `--out -`: the export goes to standard output.
STDOUT = "-"


@dataclass(frozen=True)
class Run:
    """A run directory holding a run store (`run.sqlite`); every read opens the store read-only. `qc`: the quality
    control `scores`, `paired` and `quality_control` apply unless given one (`evaluate`'s: its settings' `qc_*`;
    else the defaults)."""

    path: Path
    qc: QualityControl | None = None

    def _store(self) -> RunStore:
        return RunStore.open(self.path / STORE_FILE, read_only=True)

    def config(self) -> dict[str, Any]:
        """The run identity stored with the run (its settings, questions fingerprint, version)."""
        with self._store() as store:
            return store.config()

    def scores(self, qc: QualityControl | None = None, n_resamples: int = 1000) -> list[ScoreRow]:
        """Per method in table order, its estimate then its alternatives (`ScoreRow`: counts, each metric with its
        95% interval, label mass, confidence), as metrics.csv has them; an evaluate run's results only."""
        from beliefdrift.runs.scoring import score_rows

        with self._store() as store:
            rows = store.rows(trajectories=False)
        return [score.row() for score in score_rows(rows, qc or self.qc, n_resamples)]

    def quality_control(self, qc: QualityControl | None = None) -> QualityReport:
        """What quality control drops (`runs.scoring.quality_report`): per method its excluded questions;
        `.all_excluded` names the methods it leaves with none (empty rows in the tables), `.as_dict()` is what
        evaluate writes to summary.json."""
        from beliefdrift.runs.scoring import quality_report

        with self._store() as store:
            rows = store.rows(trajectories=False)
        return quality_report(rows, qc or self.qc)

    def paired(self, qc: QualityControl | None = None, n_resamples: int = 1000) -> list[PairedComparison]:
        """Each method against its baseline on the questions both keep (`runs.paired.paired_scores`: Δ of each
        metric with its paired bootstrap interval and p), as in the report's paired.md."""
        from beliefdrift.runs.paired import paired_scores

        with self._store() as store:
            rows = store.rows(trajectories=False)
        return paired_scores(rows, qc or self.qc, n_resamples)

    def emd_rows(self, distance: str = "l1") -> list[EMDRow]:
        """An emd run's EMD over its stored questions, one `EMDRow` per method in table order (`aggregate_emd`, as
        the `emd` command's summary without the noise floor): EMD‾ and EMD_k(b) under `distance` (l1, kl, tv),
        mean ± std over questions, and their drift tests (`EMDRow.drift`, `.burn_in_drift`: `DriftTest`s)."""
        from beliefdrift.diagnostics.emd import aggregate_emd
        from beliefdrift.registry import canonical_methods, parse_method

        command = self.config().get("command")
        if command != "emd":
            raise ValueError(f"{self.path}: a {command} run; EMD rows are an emd run's (bd.emd)")
        by_method: dict[str, list[dict[str, Any]]] = {}
        for record in self.records():
            by_method.setdefault(record["method"], []).append(record)
        return [aggregate_emd(parse_method(name).title, by_method[name], distance)
                for name in canonical_methods(list(by_method))]

    def trajectories(self) -> list[dict[str, Any]]:
        """Per stored question × method of a resampling method: `answers` [J, N], `thetas` [J, N+1, K],
        `valid_mass` [J, N+1] and `seeds` [J, m] (numpy arrays). Only evaluate stores paths; a diagnostic run's
        per-step quantities (drift's `marginal_mean`, reasoning's `rollouts`) are in `records()`."""
        with self._store() as store:
            rows = store.rows(trajectories=True)
        return [{"question_id": row.question_id, "method": row.method, "answers": row.answers, "thetas": row.thetas,
                 "valid_mass": row.valid_mass, "seeds": row.seeds} for row in rows if row.thetas is not None]

    def records(self, trajectories: bool = False) -> list[dict[str, Any]]:
        """One row per stored question × method, as plain Python values: an evaluate run's estimate (`probs`, the
        alternatives in `estimates`), target and mean label mass, and every quantity a diagnostic stored (drift's
        marginal means, emd's `emd_bar_l1`, …); with `trajectories`, the paths' arrays as nested lists too."""
        with self._store() as store:
            rows = {(row.question_id, row.method): result_fields(row, trajectories)
                    for row in store.rows(trajectories=trajectories)}
            for unit in store.record_units():
                rows.setdefault(unit, {"question_id": unit[0], "method": unit[1]}).update(store.records(*unit))
        return list(rows.values())


def result_fields(row: ResultRow, trajectories: bool) -> dict[str, Any]:
    """A stored result as plain values (arrays as lists)."""
    fields: dict[str, Any] = {
        "question_id": row.question_id, "method": row.method, "position": row.position, "target": row.target,
        "probs": row.probs.tolist(), "estimates": {name: p.tolist() for name, p in row.alternatives.items()},
        "valid_mass_mean": row.valid_mass_mean, "seconds": row.seconds,
    }
    if trajectories:
        for name in ("answers", "seeds", "thetas", "valid_mass"):
            value = getattr(row, name)
            fields[name] = None if value is None else value.tolist()
    return fields


def open_run(path: str | Path) -> Run:
    """The run in directory `path` (or the directory of the run store `path`), finished or partial."""
    path = Path(path)
    directory = path.parent if path.name == STORE_FILE else path
    check_directory(directory, "run directory")
    if not (directory / STORE_FILE).is_file():
        raise StoreError(f"{directory}: no run store ({STORE_FILE}) there")
    return Run(directory)


def evaluate(*, questions: Questions | None = None, lm: Model | None = None,
             config: EvalConfig | str | Path | None = None, progress: bool = True, **settings: Any) -> Run:
    """Run (or resume) `beliefdrift evaluate` (`EvalConfig`: its settings, here `config` and the keywords) on
    `questions` with `lm` into the settings' `out`, and return the run: per question × method its estimate, its
    alternatives and (resampling methods) its paths, scored under the settings' quality control (`qc_path_mass`, …).
    The methods are read as the command reads them (`config.evaluate.resolve_methods`: canonical, in table order;
    AM-PPR needs `adapter=`)."""
    from beliefdrift.config.evaluate import EvalConfig, resolve_methods
    from beliefdrift.runs.evaluate import run_evaluation

    inputs = run_inputs(EvalConfig, config, questions, lm, settings, "evaluate")
    config = resolve_methods(inputs.settings)
    path = run_evaluation(config, questions=inputs.questions, lm=inputs.lm, progress=progress)
    return Run(path.parent, config.quality_control)


def drift(*, questions: Questions | None = None, lm: Model | None = None,
          config: DriftConfig | str | Path | None = None, progress: bool = True, **settings: Any) -> Run:
    """Run (or resume) `beliefdrift drift`'s units (`DriftConfig`) into the settings' `out` and return the run: per
    question × method its marginal drift (`marginal_mean`, `marginal_std`, `marginal_shift`) and c.i.d. check."""
    from beliefdrift.config.diagnostics import DriftConfig
    from beliefdrift.runs.diagnostics import run_drift

    inputs = run_inputs(DriftConfig, config, questions, lm, settings, "drift")
    return Run(run_drift(inputs.settings, questions=inputs.questions, lm=inputs.lm, progress=progress).path.parent)


def emd(*, questions: Questions | None = None, lm: Model | None = None,
        config: EMDCommandConfig | str | Path | None = None, progress: bool = True, **settings: Any) -> Run:
    """Run (or resume) `beliefdrift emd`'s units (`EMDCommandConfig`) into the settings' `out` and return the run: per
    question × method EMD‾ (`emd_bar_l1`, …), EMD_k(b), the drift test's statistics, the c.i.d. check and the noise
    floor's step spread; `Run.emd_rows()` aggregates them over questions."""
    from beliefdrift.config.diagnostics import EMDCommandConfig
    from beliefdrift.runs.diagnostics import run_emd

    inputs = run_inputs(EMDCommandConfig, config, questions, lm, settings, "emd")
    return Run(run_emd(inputs.settings, questions=inputs.questions, lm=inputs.lm, progress=progress).path.parent)


def reasoning(*, questions: Questions | None = None, lm: Model | None = None,
              config: ReasoningCommandConfig | str | Path | None = None, progress: bool = True,
              **settings: Any) -> Run:
    """Run (or resume) `beliefdrift reasoning` (`ReasoningCommandConfig`; `questions` may be math problems too) into
    the settings' `out`, with its summary.json and figure, and return the run: per question × condition its
    rollouts, curve and answers."""
    from beliefdrift.config.reasoning import ReasoningCommandConfig
    from beliefdrift.runs.reasoning import run_reasoning

    inputs = run_inputs(ReasoningCommandConfig, config, questions, lm, settings, "reasoning")
    run_reasoning(inputs.settings, questions=inputs.questions, lm=inputs.lm, progress=progress)
    return Run(Path(inputs.settings.out))


def export_format(out: str | Path, format: str | None = None) -> str:
    """The format of an export to `out`: `format` (one of `EXPORT_FORMATS`), else the one `out`'s suffix names
    (`.jsonl`, `.csv`, `.parquet`), else jsonl; a UserError where the suffix names another format than `format`."""
    if format is not None and format not in EXPORT_FORMATS:
        raise UserError(f"--format {format}: expected {', '.join(EXPORT_FORMATS)}")
    suffix = Path(out).suffix.lower() if str(out) != STDOUT else ""
    named = suffix[1:] if suffix[1:] in EXPORT_FORMATS else None
    if format is not None and named is not None and named != format:
        raise UserError(f"--out {out}: a {suffix} file, but --format {format}; give --format {named}, or an --out "
                        f"ending in .{format}")
    return format or named or "jsonl"


def write_export(run: Run, out: str | Path, format: str | None = None) -> Path:
    """`run.records(trajectories=True)` as JSON lines, a CSV table or a parquet table (one row per question × method;
    nested values as JSON text in CSV and parquet) into the file `out` (atomically), or onto standard output where
    `out` is `-`. The format is `export_format(out, format)`'s."""
    format = export_format(out, format)
    rows = run.records(trajectories=True)
    if format == "parquet":
        data = parquet_bytes(rows)
    elif format == "csv":
        data = csv_text(rows).encode("utf-8")
    else:
        data = "".join(json.dumps(row) + "\n" for row in rows).encode("utf-8")
    if str(out) == STDOUT:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return Path(out)
    with replacing(Path(out)) as temporary:
        temporary.write_bytes(data)
    return Path(out)


def columns_of(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Every key of `rows`, in the order they first appear."""
    return list(dict.fromkeys(key for row in rows for key in row))


def csv_text(rows: Sequence[dict[str, Any]]) -> str:
    """`rows` as CSV: a header of every key, floats written exactly, nested values as JSON text, None as empty."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns_of(rows), lineterminator="\n")
    writer.writeheader()
    writer.writerows({key: encoded(value) for key, value in row.items()} for row in rows)
    return buffer.getvalue()


def parquet_bytes(rows: Sequence[dict[str, Any]]) -> bytes:
    """`rows` as a parquet table; nested values (estimates, records of several types) as JSON text columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({key: [encoded(row.get(key)) for row in rows] for key in columns_of(rows)})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def encoded(value: Any) -> Any:
    """A parquet cell: numbers and strings as they are, anything nested as JSON text."""
    return json.dumps(value) if isinstance(value, (dict, list)) else value
