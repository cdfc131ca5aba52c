"""The run explorer: one interactive page over a run set (`explorer.html`), written by `beliefdrift report --html`
and by `beliefdrift paper`. It opens from disk with no server and no network: the plotting library (plotly.js,
shipped inside the `plotly` Python package) and the run set's summary are embedded in the page; each question's
paths (θ_n of every path, quantised to 16 bits, with their answers and seeds) sit in a small script file under
`explorer-data/` beside it, loaded when the question is opened, so a run of the paper's size stays a page of a few
MB. The page is rendered from templates/explorer.html.j2 with its script, templates/explorer.js, inlined (so the page
stays one file; `.ci/eslint` lints the script, tests/test_explorer.py runs it); every value it shows reaches it as
JSON and is written into the page as text, never as markup.

Every number reaches the page at full precision and is rounded once, where it is shown, by the rule the tables
use (`report.text.fixed`: to even, never `-0`), so the page shows the digits of tables.md and paired.md and the
CSVs hold the numbers behind them. Every row, estimate and plot is keyed by its run: two runs of the same methods
(two models, dtypes or seeds) stay apart, and `compare` holds Δ = second − first of each pair of evaluate runs on
the questions they share (`report.compare`), which the page's compare view shows.

The page reads every fact from the data rather than knowing it: a method's display name (`titles`: the registry's
`Method.title`), the metric columns (`metrics`: the tables' `TABLES`), whether a figure has a valid interval (its
bounds are null where the metrics layer left them NaN), which question × method quality control excluded (`qc` and
each row's `excluded`: `runs.scoring.excluded_units`, the rule the scores apply).

What each run directory contributes depends on the command that wrote it: evaluate (run.sqlite results: method
tables, paired comparisons, reliability bins, the question browser and its trajectories), drift and emd
(run.sqlite records and summary.json: marginal drift and EMD per question, EMD_k(b) with its noise floor),
reasoning (summary.json: the CoT drift curves) and train (log.csv: the training curves). A run's question texts are
those it kept beside its store (`data.question.QUESTIONS_FILE`), whatever its dataset; a run from before that file
has them loaded from its dataset as it loaded them.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import importlib.resources
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from jinja2 import Environment, PackageLoader, select_autoescape

from beliefdrift.data.question import LETTERS, MCQuestion, read_questions
from beliefdrift.data.registry import fingerprint, load_dataset
from beliefdrift.diagnostics.drift_test import DRIFT_LEVEL
from beliefdrift.errors import UserError
from beliefdrift.files import write_atomic
from beliefdrift.metrics.functional import METRICS, reliability_bins
from beliefdrift.registry import parse_method
from beliefdrift.report.compare import compare_runs
from beliefdrift.report.paired import paired_scores
from beliefdrift.report.tables import TABLES, dataset_title
from beliefdrift.runs.scoring import ESTIMATOR_TITLES, QualityControl, excluded_units, score_rows
from beliefdrift.runs.store import STORE_FILE, ResultRow, RunStore

EXPLORER_FILE = "explorer.html"
SCRIPT_FILE = "explorer.js"
SIDECAR_DIR = "explorer-data"
#: θ in the sidecar files: round(θ · QUANT) as little-endian uint16.
QUANT = 65535


def plotly_js() -> str:
    """plotly.js as the `plotly` package ships it (a UserError naming the install when it is missing)."""
    try:
        return (importlib.resources.files("plotly") / "package_data" / "plotly.min.js").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError) as err:
        raise UserError("the explorer page needs the plotly package (pip install plotly)") from err


def explorer_script() -> str:
    """The page's script (templates/explorer.js), to be inlined in a `<script>` element."""
    text = (importlib.resources.files("beliefdrift.report") / "templates" / SCRIPT_FILE).read_text(encoding="utf-8")
    if "</script" in text.lower():
        raise ValueError(f"{SCRIPT_FILE} must not contain '</script': it would end the page's script element")
    return text


def method_title(name: str) -> str:
    """A stored method name's display name, as the tables print it (`Method.title`); the name if it is not one."""
    try:
        return parse_method(name).title
    except ValueError:
        return name


def table_metrics() -> list[dict[str, Any]]:
    """The metric columns of the method table in the tables' order (Tables 1 and 2: CE2 beside ECE), and whether
    each is shown in percent."""
    return [{"name": name, "percent": name in METRICS and METRICS[name].percent}
            for _, names, _, _ in TABLES for name in names]


def plain(value: Any) -> Any:
    """`value` as JSON-ready data: numpy arrays and numbers as lists and floats (at full precision: the page rounds
    once, where it shows a number), NaN and infinities as None."""
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def script_json(value: Any) -> str:
    """JSON safe inside a `<script>` element or a script file: `</` and `<!--` cannot close or open anything."""
    text = json.dumps(plain(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def quantised(thetas: np.ndarray) -> str:
    """θ [J, N+1, K] as base64 of little-endian uint16 round(θ · QUANT) (the page decodes it)."""
    levels = np.rint(np.clip(thetas, 0.0, 1.0) * QUANT).astype("<u2")
    return base64.b64encode(levels.tobytes()).decode()


def run_questions(directory: Path, config: Mapping[str, Any]) -> dict[str, MCQuestion]:
    """The run's questions by id: those it kept beside its store (`QUESTIONS_FILE`), else (a run from before that
    file) loaded as the run loaded them (dataset, split, n, seed; data from $BELIEFDRIFT_DATA); {} when neither is
    there or they are not the ones the run fingerprinted."""
    try:
        questions: Sequence[Any] = read_questions(directory)
    except (OSError, ValueError, TypeError, KeyError):
        try:
            questions = load_dataset(str(config["dataset"]), split=config.get("split"), n=config.get("n"),
                                     seed=config.get("seed", 0))
        except Exception:  # noqa: BLE001 (a page without question texts beats no page)
            return {}
    if config.get("questions_sha256") and fingerprint(questions) != config["questions_sha256"]:
        return {}
    return {q.id: q for q in questions if isinstance(q, MCQuestion)}


def question_entry(question: MCQuestion | None, qid: str, dataset: str, num_labels: int = 0) -> dict[str, Any]:
    """A question's text for the browser (its id and `num_labels` letters when the texts are not known)."""
    if question is None:
        return {"id": qid, "dataset": dataset, "stem": "", "options": [], "labels": list(LETTERS[:num_labels])}
    return {"id": qid, "dataset": dataset, "stem": question.stem, "options": list(question.choices),
            "labels": list(question.labels), "answer": question.answer}


def spread(thetas: np.ndarray | None) -> float:
    """The spread of θ_N across paths: the mean over options of its standard deviation over paths."""
    return math.nan if thetas is None or len(thetas) < 2 else float(thetas[:, -1].std(axis=0).mean())


def trajectory_file(thetas: np.ndarray, answers: np.ndarray | None, seeds: np.ndarray | None) -> dict[str, Any]:
    """One method's paths on one question for the sidecar: quantised θ, answers, seeds."""
    return {"shape": list(thetas.shape), "theta": quantised(thetas), "answers": answers, "seeds": seeds}


def evaluate_run(tag: str, directory: Path, config: Mapping[str, Any], qc: QualityControl, n_resamples: int,
                 sidecar: Path) -> dict[str, Any]:
    """An evaluate run: its method table, paired comparisons, reliability bins and questions (their paths written
    under `sidecar`, one script file `<tag>-<i>.js` per question)."""
    with RunStore.open(directory / STORE_FILE, read_only=True) as store:
        rows = store.rows()
    scores = score_rows(rows, qc, n_resamples)
    table = [{"method": s.title, "name": s.method.name, "estimator": s.estimator_name, "own": s.estimator is None,
              "n": s.n, "excluded": s.excluded, "nll_clipped": s.summary["nll_clipped"] if s.summary else 0,
              **{m["name"]: list(s.summary[m["name"]]) if s.summary else None for m in table_metrics()}}
             for s in scores]
    reliability = []
    for s in scores:
        if s.estimator is None and s.n:
            bins = reliability_bins(s.probs, s.targets)
            reliability.append({"method": s.title, "name": s.method.name, "n": s.n, "edges": bins.edges,
                                "count": bins.count, "accuracy": bins.accuracy, "confidence": bins.confidence})
    paired = [{"method": p.method.name, "baseline": p.baseline.name, "n": p.n,
               "deltas": {metric: list(d) for metric, d in p.deltas.items()}} for p in paired_scores(rows, qc,
                                                                                                  n_resamples)]
    excluded = excluded_units(rows, qc)
    texts, dataset = run_questions(directory, config), dataset_title(str(config.get("dataset", "")))
    questions: dict[str, dict[str, Any]] = {}
    paths: dict[str, dict[str, Any]] = {}
    for row in rows:
        entry = questions.setdefault(row.question_id, {**question_entry(texts.get(row.question_id), row.question_id,
                                                                        dataset, row.num_labels),
                                                       "position": row.position, "target": row.target,
                                                       "methods": {}})
        predicted = int(np.argmax(row.probs))
        entry["methods"][row.method] = {
            "probs": row.probs, "predicted": predicted, "correct": predicted == row.target,
            "confidence": float(row.probs[predicted]), "spread": spread(row.thetas),
            "excluded": (row.question_id, row.method) in excluded,
            "mass": row.valid_mass_mean, "alternatives": dict(row.alternatives)}
        if row.thetas is not None:
            paths.setdefault(row.question_id, {})[row.method] = trajectory_file(row.thetas, row.answers, row.seeds)
    sidecar.mkdir(parents=True, exist_ok=True)
    for i, (qid, methods) in enumerate(paths.items()):
        questions[qid]["paths"] = f"{sidecar.name}/{tag}-{i}.js"
        write_atomic(sidecar / f"{tag}-{i}.js", f"explorerPaths({script_json(questions[qid]['paths'])},"
                                                 f"{script_json(methods)});\n")
    return {"table": table, "paired": paired, "reliability": reliability, "questions": list(questions.values()),
            "compute_seconds": stored_seconds(directory, "evaluate", rows)}


def records_run(directory: Path, config: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """A drift or emd run: the `keys` of each question × method's records, and the command's summary.json."""
    with RunStore.open(directory / STORE_FILE, read_only=True) as store:
        units = store.record_units()
        records = {unit: store.records(*unit) for unit in units}
    texts, dataset = run_questions(directory, config), dataset_title(str(config.get("dataset", "")))
    questions: dict[str, dict[str, Any]] = {}
    for (qid, method), values in records.items():
        entry = questions.setdefault(qid, {**question_entry(texts.get(qid), qid, dataset), "methods": {}})
        entry["methods"][method] = {key: values[key] for key in keys if key in values}
    summary = directory / "summary.json"
    return {"questions": list(questions.values()),
            "summary": json.loads(summary.read_text()) if summary.is_file() else {}}


def train_log(directory: Path) -> dict[str, list[float | None]]:
    """train's log.csv as columns of numbers (empty cells as None)."""
    with open(directory / "log.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    columns: dict[str, list[float | None]] = {}
    for row in rows:
        for key, value in row.items():
            try:
                columns.setdefault(key, []).append(float(value) if value not in ("", None) else None)
            except ValueError:
                continue
    return columns


def run_names(run_dirs: Sequence[Path]) -> list[str]:
    """Each run's name on the page: its directory's name, or the path as given where two share a name."""
    names = [Path(d).name or Path(d).resolve().name for d in run_dirs]
    return [name if names.count(name) == 1 else str(d) for name, d in zip(names, run_dirs, strict=True)]


def stored_seconds(directory: Path, command: str, rows: Sequence[ResultRow] = ()) -> float | None:
    """The compute time a run stored (None where it stores none: drift, emd): evaluate's per-question times (each
    model pass of a question counted once; its methods' rows share it), reasoning's per-question times, train's
    per-update times."""
    if rows:
        return sum(seconds for _, seconds in {(row.question_id, row.seconds) for row in rows})
    if command == "reasoning" and (directory / STORE_FILE).is_file():
        with RunStore.open(directory / STORE_FILE, read_only=True) as store:
            units = store.record_units()
            times = {qid: store.records(qid, condition).get("seconds", 0.0) for qid, condition in units}
        return sum(times.values()) if times else None
    logged = train_log(directory).get("seconds") if command == "train" else None
    return sum(v for v in logged if v is not None) if logged else None


def run_entry(tag: str, name: str, directory: Path, qc: QualityControl, n_resamples: int, sidecar: Path,
              wall: Mapping[str, float]) -> dict[str, Any] | None:
    """What the page shows of one run directory, as `name` (None when it holds no run output the explorer reads);
    `tag` names its sidecar files. Its time: the wall time `paper` recorded (`wall`, by directory name), else the
    compute time it stored (`stored_seconds`)."""
    directory = Path(directory)
    entry: dict[str, Any] = {"name": name, "directory": str(directory)}
    recorded = wall.get(directory.name or directory.resolve().name)
    run: dict[str, Any] | None = None
    if (directory / STORE_FILE).is_file():
        with RunStore.open(directory / STORE_FILE, read_only=True) as store:
            config, results = store.config(), store.count()
        command = str(config.get("command", "evaluate"))
        entry.update(command=command, settings=config)
        if results:
            run = {**entry, **evaluate_run(tag, directory, config, qc, n_resamples, sidecar)}
        elif command == "drift":
            run = {**entry, **records_run(directory, config, ("marginal_mean", "marginal_shift", "cid_l1"))}
        elif command == "emd":
            distances = config.get("distance", ["l1"])
            keys = [f"{prefix}_{d}" for d in distances for prefix in ("emd_bar", "emd_k_b")]
            run = {**entry, **records_run(directory, config, keys)}
    summary = directory / "summary.json"
    if run is None and summary.is_file() and "conditions" in (content := json.loads(summary.read_text())):
        run = {**entry, "command": "reasoning", "conditions": content["conditions"],
               "settings": {k: v for k, v in content.items() if k != "conditions"}}
    elif run is None and (directory / "log.csv").is_file():
        config_file = directory / "config.yaml"
        run = {**entry, "command": "train", "log": train_log(directory),
               "settings": yaml.safe_load(config_file.read_text()) if config_file.is_file() else {}}
    if run is None:
        return None
    stored = run.pop("compute_seconds", None)
    if recorded is None and stored is None:
        stored = stored_seconds(directory, run["command"])
    run["seconds"], run["timed"] = (recorded, "wall") if recorded is not None else (stored, "stored")
    return run


def run_comparisons(runs: Sequence[Mapping[str, Any]], qc: QualityControl, n_resamples: int) -> list[dict[str, Any]]:
    """Δ = second − first (`report.compare.compare_runs`) of every pair of evaluate runs, in page order, that stored
    a question of the same id (runs of other benchmarks are not compared)."""
    evaluated = [run for run in runs if run.get("table")]
    rows = {}
    for run in evaluated:
        with RunStore.open(Path(run["directory"]) / STORE_FILE, read_only=True) as store:
            rows[run["name"]] = store.rows(trajectories=False)
    out = []
    for i, first in enumerate(evaluated):
        for second in evaluated[i + 1:]:
            a, b = rows[first["name"]], rows[second["name"]]
            if {row.question_id for row in a}.isdisjoint(row.question_id for row in b):
                continue
            methods = compare_runs(a, b, qc, n_resamples)
            if methods:
                out.append({"first": first["name"], "second": second["name"], "methods": [
                    {"name": m.method, "n": m.n, "deltas": {metric: list(d) for metric, d in m.deltas.items()}}
                    for m in methods]})
    return out


def explorer_data(run_dirs: Sequence[Path], out: Path, qc: QualityControl | None = None, n_resamples: int = 1000,
                  environment: Mapping[str, Any] | None = None, wall: Mapping[str, float] | None = None
                  ) -> dict[str, Any]:
    """The page's data over `run_dirs` (question paths written under `out/explorer-data`)."""
    sidecar, qc = Path(out) / SIDECAR_DIR, qc or QualityControl()
    runs = [run for i, (name, directory) in enumerate(zip(run_names(run_dirs), run_dirs, strict=True))
            if (run := run_entry(f"r{i}", name, directory, qc, n_resamples, sidecar, wall or {})) is not None]
    names = {name for run in runs for question in run.get("questions", ()) for name in question["methods"]}
    return {"runs": runs, "compare": run_comparisons(runs, qc, n_resamples), "environment": environment or {},
            "quant": QUANT, "titles": {name: method_title(name) for name in sorted(names)},
            "metrics": table_metrics(), "estimators": ESTIMATOR_TITLES,
            "qc": {**dataclasses.asdict(qc), "rule": qc.describe()},
            "drift_level": DRIFT_LEVEL}


def write_explorer(run_dirs: Sequence[Path], out: Path, qc: QualityControl | None = None, n_resamples: int = 1000,
                   environment: Mapping[str, Any] | None = None, wall: Mapping[str, float] | None = None,
                   title: str = "beliefdrift run explorer") -> Path:
    """Write `out/explorer.html` (and its `explorer-data/` folder) over `run_dirs`; return the page's path."""
    data = explorer_data(run_dirs, out, qc, n_resamples, environment, wall)
    if not data["runs"]:
        raise UserError(f"no run output the explorer can show in {', '.join(map(str, run_dirs))}")
    templates = Environment(loader=PackageLoader("beliefdrift.report", "templates"),
                            autoescape=select_autoescape(["html", "j2"]))
    page = templates.get_template("explorer.html.j2").render(title=title, data=script_json(data), plotly=plotly_js(),
                                                             script=explorer_script())
    path = Path(out) / EXPLORER_FILE
    write_atomic(path, page)
    return path
