"""`beliefdrift report` on synthetic run stores: 3 datasets × 4 methods × Q questions, B bootstrap resamples.

Each store holds what an evaluation writes: per question and method the estimate, the q*_RB and θ̂_1
alternatives (PPR and AM-PPR), the paths' label mass (a few questions fail quality control) and their answers,
seed answers and θ_n. Reading a store is timed whole (`rows()`) and as the report reads it (`rows(trajectories=
False)`: no per-path answers, seeds, θ_n). The table build (`load_run` → `score_rows` → `summarize` per method and
estimator, then tables.md/.tex/metrics.csv) is timed with the vectorised bootstrap and with a per-resample loop
over the same resamples (the path `bootstrap_ci` takes for a metric it has no vectorised core for: the scalar
metric on each resample), in the same run, and the two tables are compared. The reliability diagrams (PNG, the
default, and PNG + PDF) and the whole `write_report` (what `beliefdrift report` runs, default options) are timed
too.

    OMP_NUM_THREADS=1 python bench/report.py [--questions 500] [--bootstrap 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np

from beliefdrift.metrics import functional as metrics
from beliefdrift.report.reliability import reliability_figures
from beliefdrift.report.runs import load_run, write_report
from beliefdrift.report.tables import RunScores, write_tables
from beliefdrift.runs.scoring import QualityControl
from beliefdrift.runs.store import STORE_FILE, ResultRow, RunStore

DATASETS = {"csqa": 5, "arc": 4, "tinymmlu": 4}  # dataset → options per question
METHODS = ("ppr", "ppr-seed5", "am-ppr-seed1", "direct")
PATHS, STEPS = 8, 10


def estimate(rng: np.random.Generator, num_labels: int, target: int) -> np.ndarray:
    """A softmax of noisy logits with a bump on the target 60% of the time (else on a random option)."""
    logits = rng.normal(0.0, rng.choice([0.5, 1.5, 3.0]), num_labels)
    logits[target if rng.random() < 0.6 else rng.integers(num_labels)] += 1.5
    return np.exp(logits) / np.exp(logits).sum()


def synthetic_rows(num_labels: int, questions: int, rng: np.random.Generator) -> list[ResultRow]:
    """Every method's row for each question; about 3% of the PPR questions have most paths off-format."""
    rows = []
    for position in range(questions):
        target = int(rng.integers(num_labels))
        for method in METHODS:
            if method == "direct":
                valid_mass, alternatives, paths = np.full((1, 1), 0.95), {}, {}
            else:
                off_format = rng.random() < 0.03
                valid_mass = rng.uniform(0.0 if off_format else 0.6, 0.4 if off_format else 1.0, (PATHS, STEPS + 1))
                alternatives = {name: estimate(rng, num_labels, target) for name in ("q_star_rb", "theta_1")}
                paths = {"answers": rng.integers(num_labels, size=(PATHS, STEPS)),
                         "seeds": rng.integers(num_labels, size=(PATHS, 5 if "seed5" in method else 1)),
                         "thetas": rng.dirichlet(np.ones(num_labels), (PATHS, STEPS + 1)).astype(np.float32)}
            rows.append(ResultRow(f"q{position}", method, position, target, num_labels,
                                  estimate(rng, num_labels, target), valid_mass, **paths, alternatives=alternatives))
    return rows


def write_stores(root: Path, questions: int, seed: int = 0) -> list[Path]:
    rng = np.random.default_rng(seed)
    run_dirs = []
    for dataset, num_labels in DATASETS.items():
        run_dir = root / dataset
        run_dir.mkdir()
        with RunStore.open(run_dir / STORE_FILE) as store:
            store.ensure_config({"dataset": dataset, "model": "synthetic", "questions": questions,
                                 "methods": list(METHODS)})
            store.add(synthetic_rows(num_labels, questions, rng))
        run_dirs.append(run_dir)
    return run_dirs


def build_tables(run_dirs: list[Path], out: Path, n_resamples: int) -> list[RunScores]:
    runs = [load_run(run_dir, QualityControl(), n_resamples)[0] for run_dir in run_dirs]
    write_tables(runs, out)
    return runs


def read_stores(run_dirs: list[Path], trajectories: bool) -> int:
    """How many rows the run stores hold, read whole or as the report reads them."""
    rows = 0
    for run_dir in run_dirs:
        with RunStore.open(run_dir / STORE_FILE, read_only=True) as store:
            rows += len(store.rows(trajectories=trajectories))
    return rows


def timed(repeats: int, fn, *args):
    """The result of the last call fn(*args) and the best wall-clock and CPU (this process) times over `repeats`
    calls; on a shared machine the CPU time is the steadier of the two."""
    wall = cpu = float("inf")
    for _ in range(repeats):
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        result = fn(*args)
        wall, cpu = min(wall, time.perf_counter() - start_wall), min(cpu, time.process_time() - start_cpu)
    return result, wall, cpu


def intervals(runs: list[RunScores]) -> np.ndarray:
    return np.array([score.summary[name] for run in runs for score in run.scores for name in metrics.METRIC_NAMES])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs of the vectorised build")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run_dirs = write_stores(root, args.questions)
        _, *t_read = timed(args.repeats, read_stores, run_dirs, True)
        _, *t_light = timed(args.repeats, read_stores, run_dirs, False)
        fast, *t_fast = timed(args.repeats, build_tables, run_dirs, root / "fast", args.bootstrap)
        with mock.patch.dict(metrics._CORES, clear=True):  # no vectorised cores: every metric per resample
            loop, *t_loop = timed(1, build_tables, run_dirs, root / "loop", args.bootstrap)
        same_tables = all((root / "fast" / name).read_text() == (root / "loop" / name).read_text()
                          for name in ("tables.md", "tables.tex"))
        difference = np.nanmax(np.abs(intervals(fast) - intervals(loop)))
        _, *t_figures = timed(args.repeats, reliability_figures, fast, root / "figures")
        _, *t_pdf = timed(args.repeats, reliability_figures, fast, root / "pdf", ("png", "pdf"))
        _, *t_report = timed(args.repeats, write_report, run_dirs, root / "report", QualityControl(), args.bootstrap)
    summaries = sum(len(run.scores) for run in fast)
    print(f"{len(DATASETS)} datasets × {len(METHODS)} methods × {args.questions} questions: {summaries} summaries "
          f"(estimates and alternatives) × {len(metrics.METRIC_NAMES)} metrics × {args.bootstrap} resamples; "
          f"best of {args.repeats} except the loop")
    print("| step | wall s | CPU s |\n|---|---|---|")
    for step, (wall, cpu) in (("store read, whole rows", t_read),
                              ("store read, what the report needs", t_light),
                              ("table build, vectorised bootstrap", t_fast),
                              ("table build, per-resample loop", t_loop),
                              ("reliability diagrams (PNG)", t_figures),
                              ("reliability diagrams (PNG + PDF)", t_pdf),
                              ("write_report (all of `beliefdrift report`)", t_report)):
        print(f"| {step} | {wall:.2f} | {cpu:.2f} |")
    print(f"table build speed-up: {t_loop[0] / t_fast[0]:.1f}x wall, {t_loop[1] / t_fast[1]:.1f}x CPU; "
          f"same tables.md/.tex: {same_tables}; max |interval difference| {difference:.2g}")

if __name__ == "__main__":
    main()
