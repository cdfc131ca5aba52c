"""Results you can hold: `bd.evaluate` returns a run, `bd.open_run` opens any run directory, `beliefdrift export`
writes one row per question × method."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import beliefdrift as bd
from beliefdrift.cli.main import main
from beliefdrift.report.runs import write_report
from beliefdrift.runs.store import STORE_FILE, RunStore, StoreError


@pytest.fixture
def evaluated(tiny_model_dir: Path, tiny_lm, tmp_path: Path) -> bd.Run:
    config = bd.EvalConfig(model=str(tiny_model_dir), dtype="float32", n=2, paths=2, steps=3,
                           methods=["direct", "ppr"], out=tmp_path / "run")
    return bd.evaluate(config, lm=tiny_lm, progress=False)


def test_evaluate_returns_the_run_and_its_scores_equal_the_report(evaluated: bd.Run, tmp_path: Path) -> None:
    assert evaluated.path == tmp_path / "run" and evaluated.config()["command"] == "evaluate"
    keep_all = bd.QualityControl(path_mass=0.0)  # the tiny random model's label mass is small: keep its questions
    scores = evaluated.scores(keep_all)
    write_report([evaluated.path], tmp_path / "report", keep_all)
    with open(tmp_path / "report" / "metrics.csv") as file:
        table = list(csv.DictReader(file))
    assert [(s["method"], s["estimator"]) for s in scores] == [(r["method"], r["estimator"]) for r in table]
    for score, row in zip(scores, table, strict=True):
        assert repr(score["ACC"]) == row["ACC"] and repr(score["NLL_high"]) == row["NLL_high"]
        assert score["n"] == int(row["n"])


def test_records_trajectories_and_open_run(evaluated: bd.Run) -> None:
    records = evaluated.records()
    assert [(r["question_id"], r["method"]) for r in records][:2] == [(records[0]["question_id"], "direct"),
                                                                        (records[0]["question_id"], "ppr")]
    assert len(records) == 4 and all(abs(sum(r["probs"]) - 1) < 1e-5 for r in records)
    assert set(records[1]["estimates"]) == {"q_star_rb", "theta_1"}
    trajectories = evaluated.trajectories()
    assert len(trajectories) == 2 and {t["method"] for t in trajectories} == {"ppr"}
    assert trajectories[0]["thetas"].shape[:2] == (2, 4) and trajectories[0]["answers"].shape == (2, 3)
    assert bd.open_run(evaluated.path).records() == records
    assert bd.open_run(evaluated.path / STORE_FILE).path == evaluated.path


def test_open_run_of_a_directory_without_a_store(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no run store"):
        bd.open_run(tmp_path)


@pytest.mark.parametrize("format", ["jsonl", "parquet"])
def test_export_one_row_per_question_and_method(evaluated: bd.Run, format: str) -> None:
    assert main(["export", str(evaluated.path), "--format", format]) == 0
    out = evaluated.path / f"export.{format}"
    if format == "jsonl":
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(rows[1]["thetas"]) == 2 and rows[0]["thetas"] is None  # ppr's paths; direct has none
    else:
        rows = pq.read_table(out).to_pylist()
        assert json.loads(rows[1]["thetas"])[0][0] == pytest.approx(json.loads(rows[1]["thetas"])[0][0])
    assert len(rows) == 4 and {row["method"] for row in rows} == {"direct", "ppr"}


def test_a_diagnostic_run_exports_its_records(tmp_path: Path) -> None:
    """drift, emd and reasoning store named quantities per question × method: each is a column of the row."""
    with RunStore.open(tmp_path / STORE_FILE) as store:
        store.ensure_config({"command": "emd"})
        store.add_records("q1", {"ppr": {"emd_bar_l1": 0.25, "emd_k_b_l1": [0.1, 0.2]},
                                 "ppr-seed5": {"emd_bar_l1": 0.1}})
    run = bd.open_run(tmp_path)
    assert run.records() == [{"question_id": "q1", "method": "ppr", "emd_bar_l1": 0.25, "emd_k_b_l1": [0.1, 0.2]},
                             {"question_id": "q1", "method": "ppr-seed5", "emd_bar_l1": 0.1}]
    assert run.scores() == [] and run.trajectories() == []
    rows = pq.read_table(bd.write_export(run, tmp_path / "e.parquet", "parquet")).to_pylist()
    assert rows[0]["emd_k_b_l1"] == "[0.1, 0.2]" and rows[1]["emd_k_b_l1"] is None


#: Tiny settings of each diagnostic command: (its settings class, the Python API's fields, the same as flags).
DIAGNOSTICS = {
    "drift": ("DriftConfig", {"paths": 2, "steps": 3, "methods": ["ppr", "ppr-seed1"], "plot_questions": 0},
              ["-J", "2", "-N", "3", "--methods", "ppr", "ppr-seed1", "--plot-questions", "0"]),
    "emd": ("EMDCommandConfig", {"paths": 2, "steps": 2, "methods": ["ppr"], "horizon": 2, "prefix_lengths": [0],
                                 "burn_in": 1, "lookahead": 2, "noise_floor_replicates": 0},
            ["-J", "2", "-N", "2", "--methods", "ppr", "-K", "2", "--prefix-lengths", "0", "--burn-in", "1", "-k", "2",
             "--noise-floor-replicates", "0"]),
    "reasoning": ("ReasoningCommandConfig", {"paths": 1, "steps": 2, "seed_pairs": 1, "tau": 1, "max_new_tokens": 24,
                                             "seed_max_new_tokens": 12, "max_solution_tokens": 3},
                  ["-J", "1", "-N", "2", "-m", "1", "--tau", "1", "--max-new-tokens", "24", "--seed-max-new-tokens",
                   "12", "--max-solution-tokens", "3"]),
}


@pytest.mark.parametrize("name", DIAGNOSTICS)
def test_drift_emd_and_reasoning_return_the_run_the_command_stores(name: str, tiny_model_dir: Path, tiny_lm,
                                                                   tmp_path: Path) -> None:
    settings, fields, flags = DIAGNOSTICS[name]
    common = {"model": str(tiny_model_dir), "dtype": "float32", "dataset": "demo", "n": 2}
    run = getattr(bd, name)(getattr(bd, settings)(**common, **fields, out=tmp_path / "api"), lm=tiny_lm,
                            progress=False)
    assert main([name, "--model", str(tiny_model_dir), "--dtype", "float32", "--dataset", "demo", "-n", "2", *flags,
                 "--out", str(tmp_path / "cli")]) == 0
    cli = bd.open_run(tmp_path / "cli")
    assert run.path == tmp_path / "api" and run.config() == cli.config() and run.config()["command"] == name

    def timeless(records: list[dict]) -> list[dict]:
        return [{k: v for k, v in record.items() if k != "seconds"} for record in records]

    records = run.records()
    assert len(records) == 2 * len(fields.get("methods", ["ppr", "ppr-seed1"])) and run.trajectories() == []
    assert timeless(records) == timeless(cli.records()) == timeless(bd.open_run(run.path).records())
    quantity = {"drift": "marginal_mean", "emd": "emd_bar_l1", "reasoning": "curve"}[name]
    assert all(quantity in record for record in records)  # e.g. each question's EMD‾
