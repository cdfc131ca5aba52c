"""Results you can hold: `bd.evaluate` returns a run, `bd.open_run` opens any run directory, `beliefdrift export`
writes one row per question × method."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import beliefdrift as bd
from beliefdrift.cli.main import main
from beliefdrift.data.loaders import DataError
from beliefdrift.errors import UserError
from beliefdrift.report.runs import write_report
from beliefdrift.runs.store import STORE_FILE, RunStore, StoreError


@pytest.fixture
def evaluated(tiny_model_dir: Path, tiny_lm, tmp_path: Path) -> bd.Run:
    config = bd.EvalConfig(model=str(tiny_model_dir), dtype="float32", n=2, paths=2, steps=3,
                           methods=["direct", "ppr"], out=tmp_path / "run")
    return bd.evaluate(config=config, lm=tiny_lm, progress=False)


def test_evaluate_returns_the_run_and_its_scores_equal_the_report(evaluated: bd.Run, tmp_path: Path) -> None:
    assert evaluated.path == tmp_path / "run" and evaluated.config()["command"] == "evaluate"
    keep_all = bd.QualityControl(path_mass=0.0)  # the tiny random model's label mass is small: keep its questions
    scores = evaluated.scores(keep_all)
    write_report([evaluated.path], tmp_path / "report", keep_all)
    with open(tmp_path / "report" / "metrics.csv") as file:
        table = list(csv.DictReader(file))
    assert [(s.method, s.estimator) for s in scores] == [(r["method"], r["estimator"]) for r in table]
    for score, row in zip(scores, table, strict=True):
        assert repr(score.metrics["ACC"].point) == row["ACC"] and repr(score.metrics["NLL"].high) == row["NLL_high"]
        assert score.n == int(row["n"]) and score.title == row["title"]
        assert math.isnan(score.metrics["ECE"].low) and row["ECE_low"] == "nan"  # no valid interval: NaN everywhere


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


FIXTURES = Path(__file__).parent / "fixtures" / "data"

#: Tiny settings of each diagnostic command: (the Python API's keywords, the same as flags).
DIAGNOSTICS = {
    "drift": ({"paths": 2, "steps": 3, "methods": ["ppr", "ppr-seed1"], "plot_questions": 0},
              ["-J", "2", "-N", "3", "--methods", "ppr", "ppr-seed1", "--plot-questions", "0"]),
    "emd": ({"paths": 2, "steps": 2, "methods": ["ppr"], "horizon": 2, "prefix_lengths": [0], "burn_in": 1,
             "lookahead": 2, "noise_floor_replicates": 0},
            ["-J", "2", "-N", "2", "--methods", "ppr", "-K", "2", "--prefix-lengths", "0", "--burn-in", "1", "-k", "2",
             "--noise-floor-replicates", "0"]),
    "reasoning": ({"paths": 1, "steps": 2, "seed_pairs": 1, "tau": 1, "max_new_tokens": 24, "seed_max_new_tokens": 12,
                   "max_solution_tokens": 3},
                  ["-J", "1", "-N", "2", "-m", "1", "--tau", "1", "--max-new-tokens", "24", "--seed-max-new-tokens",
                   "12", "--max-solution-tokens", "3"]),
}


@pytest.mark.parametrize("name", DIAGNOSTICS)
def test_drift_emd_and_reasoning_return_the_run_the_command_stores(name: str, tiny_model_dir: Path, tiny_lm,
                                                                   tmp_path: Path) -> None:
    """The keywords are the flags' names: the same settings as keywords (the model loaded, the questions named)
    and as flags store the same run, under the same identity."""
    fields, flags = DIAGNOSTICS[name]
    run = getattr(bd, name)(questions="demo", lm=tiny_lm, n=2, **fields, out=tmp_path / "api", progress=False)
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
    if name == "emd":  # over questions, as the command's summary has it (its noise floor aside)
        (row,) = run.emd_rows()
        assert (row.method, row.questions, row.distance) == ("PPR + NoSEED", 2, "l1") and row.drift is not None
        assert row.emd_bar == pytest.approx(sum(r["emd_bar_l1"] for r in records) / 2)
        assert len(row.burn_in) == len(row.burn_in_drift or []) == 2  # b = 0, 1
    else:
        with pytest.raises(ValueError, match=f"a {name} run; EMD rows are an emd run's"):
            run.emd_rows()


def test_questions_as_objects_or_by_name_and_settings_however_given_are_one_run(tiny_lm, tmp_path: Path) -> None:
    """`questions=` a list or the dataset's name, the settings as keywords, a dataclass or a YAML file: the same
    numbers; the same settings resume the same store (a different identity would be a StoreError)."""
    settings = {"paths": 2, "steps": 2, "methods": ["ppr", "direct"], "out": tmp_path / "named"}
    named = bd.evaluate(questions="demo", lm=tiny_lm, n=2, progress=False, **settings)
    given = bd.evaluate(questions=bd.load_dataset("demo", n=2), lm=tiny_lm, progress=False,
                        **{**settings, "out": tmp_path / "given"})

    def numbers(run: bd.Run) -> list[tuple[str, str, list[float]]]:
        return [(r["question_id"], r["method"], r["probs"]) for r in run.records()]

    assert numbers(given) == numbers(named) and len(numbers(named)) == 4
    assert [r["method"] for r in named.records()][:2] == ["direct", "ppr"]  # methods read as the command reads them
    identity, given_identity = named.config(), given.config()
    assert given_identity["questions_sha256"] == identity["questions_sha256"]
    assert (given_identity["dataset"], given_identity["n"], identity["dataset"]) == ("questions", None, "demo")
    assert identity["model"] == str(Path(tiny_lm.name).resolve()) and identity["dtype"] == "float32"

    (tmp_path / "settings.yaml").write_text("paths: 2\nsteps: 2\nmethods: [ppr, direct]\nn: 2\n")
    config = bd.EvalConfig(dataset="demo", n=2, paths=2, steps=2, methods=["direct", "ppr"], out=tmp_path / "named")
    for again in (bd.evaluate(config=config, lm=tiny_lm, progress=False),
                  bd.evaluate(config=tmp_path / "settings.yaml", lm=tiny_lm, out=tmp_path / "named", progress=False)):
        assert again.config() == identity and numbers(again) == numbers(named)


def test_the_api_says_what_is_wrong_with_its_inputs(tiny_lm, tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"evaluate\(\): unknown setting path=4; did you mean 'paths'\?"):
        bd.evaluate(questions="demo", path=4)
    with pytest.raises(UserError, match="questions= gives dataset 'csqa', dataset= gives 'demo'; give one"):
        bd.evaluate(questions="csqa", dataset="demo")
    with pytest.raises(UserError, match="lm= gives model"):
        bd.drift(lm=tiny_lm, model="another-model")
    with pytest.raises(UserError, match=r"n= select questions from a dataset; questions= gives them"):
        bd.emd(questions=bd.load_dataset("demo", n=1), n=1)
    with pytest.raises(UserError, match="an empty list"):
        bd.evaluate(questions=[])
    with pytest.raises(UserError, match=r"setting paths: expected an integer"):
        bd.evaluate(paths="many")
    with pytest.raises(TypeError, match=r"evaluate\(config=…\): expected its settings \(EvalConfig\)"):
        bd.evaluate(config=bd.DriftConfig())
    with pytest.raises(TypeError, match=r"lm=…\): expected a LanguageModel"):
        bd.evaluate(lm=tiny_lm.model)
    with pytest.raises(DataError, match="questions= questions: evaluate needs multiple-choice questions"):
        bd.evaluate(questions=bd.load_dataset(str(FIXTURES / "gsm8k_ok.jsonl"), n=1), lm=tiny_lm, out=tmp_path / "math")
    assert not (tmp_path / "math").exists()
