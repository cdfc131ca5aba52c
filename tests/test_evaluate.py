"""The evaluate loop: stored rows equal fresh forward passes, shardable over ranks, adapters, quality control,
configuration presets and clear errors for bad stores (resumable after SIGKILL: test_faults.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from test_engine import fresh_dist

from beliefdrift.backend import load_model
from beliefdrift.backend.adapters import base_model, load_adapter
from beliefdrift.cli.main import build_parser, main
from beliefdrift.config.evaluate import EvalConfig, resolve_methods
from beliefdrift.config.options import settings_from
from beliefdrift.data import MCQuestion
from beliefdrift.engine.methods import parse_method, run_methods
from beliefdrift.engine.resampling import direct_tokens, ppr_tokens
from beliefdrift.runs.distributed import Ranks
from beliefdrift.runs.evaluate import question_rows
from beliefdrift.runs.loop import Models
from beliefdrift.runs.scoring import QualityControl, canonical_methods, score_rows
from beliefdrift.runs.store import ResultRow, RunStore

REPO = Path(__file__).resolve().parents[1]
ARRAYS = ("probs", "valid_mass", "answers", "seeds", "thetas")


def row_key(row: ResultRow) -> tuple:
    """Everything stored about a unit except its wall time, as bytes."""
    arrays = tuple(None if getattr(row, name) is None else getattr(row, name).tobytes() for name in ARRAYS)
    alternatives = tuple((k, v.tobytes()) for k, v in sorted(row.alternatives.items()))
    return (row.question_id, row.method, row.position, row.target, row.num_labels, arrays, alternatives)


def stored_keys(run_dir: Path) -> list[tuple]:
    with RunStore.open(run_dir / "run.sqlite", create=False) as store:
        return [row_key(row) for row in store.rows()]


# ----------------------------------------------------------------------------------------- the loop


def test_question_rows_are_fresh_forward_passes(tiny_lm, question: MCQuestion, history_template: str) -> None:
    """Each stored row against quantities computed afresh: the direct θ and every stored θ_n from one uncached
    forward pass over the prompt, the path's seeds and its answers so far; q* from a count of the answers."""
    methods = [parse_method(name) for name in ("direct", "ppr", "ppr-seed2")]
    config = EvalConfig(seed=7, paths=3, steps=4, template=history_template)
    rows = {row.method: row for row in question_rows([(5, question)], methods, config, Models(tiny_lm))}
    assert list(rows) == ["direct", "ppr", "ppr-seed2"]
    for row in rows.values():
        assert (row.question_id, row.position, row.target, row.num_labels) == (question.id, 5, 1, 4)
        assert row.seconds > 0

    direct = fresh_dist(tiny_lm.model, direct_tokens(tiny_lm, question), [])
    np.testing.assert_allclose(rows["direct"].probs, direct.probs.double(), rtol=0, atol=1e-6)
    assert rows["direct"].valid_mass.shape == (1, 1) and rows["direct"].answers is None
    assert rows["direct"].valid_mass[0, 0] == pytest.approx(float(direct.valid_mass), abs=1e-6)

    tokens = ppr_tokens(tiny_lm, question, history_template)
    for name, m in (("ppr", 0), ("ppr-seed2", 2)):
        row = rows[name]
        assert row.answers.shape == (3, 4) and row.seeds.shape == (3, m) and row.thetas.shape == (3, 5, 4)
        for j in range(3):
            for n in (0, 2, 4):
                fresh = fresh_dist(tiny_lm.model, tokens, row.seeds[j].tolist() + row.answers[j, :n].tolist())
                np.testing.assert_allclose(row.thetas[j, n], fresh.probs, rtol=0, atol=1e-4)
                assert row.valid_mass[j, n] == pytest.approx(float(fresh.valid_mass), abs=1e-4)
        # q* counts the generated answers only (never the seeds): (1/J) Σ_j #{n: A_n^(j) = a} / N.
        counts = sum(np.bincount(path, minlength=4) for path in row.answers)
        np.testing.assert_allclose(row.probs, counts / (3 * 4), rtol=0, atol=1e-15)
        np.testing.assert_allclose(row.alternatives["q_star_rb"], row.thetas[:, :4].astype(np.float64).mean((0, 1)),
                                   rtol=0, atol=1e-12)
        np.testing.assert_allclose(row.alternatives["theta_1"], row.thetas[:, 0].astype(np.float64).mean(0),
                                   rtol=0, atol=1e-12)
    # Re-running a question gives the same bits (what a resumed run relies on).
    again = question_rows([(5, question)], methods, config, Models(tiny_lm))
    assert [row_key(r) for r in again] == [row_key(rows[r.method]) for r in again]


def test_ranks_partition_the_questions() -> None:
    shards = [[i for i in range(11) if Ranks(r, 3).owns(i)] for r in range(3)]
    assert shards == [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8]]


def test_load_adapter(tiny_model_dir: Path, tmp_path: Path, question: MCQuestion) -> None:
    from peft import LoraConfig, get_peft_model

    untouched = load_model(str(tiny_model_dir), dtype="float32")
    lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    get_peft_model(load_model(str(tiny_model_dir), dtype="float32").model, lora).save_pretrained(tmp_path / "adapter")

    lm = load_model(str(tiny_model_dir), dtype="float32")
    tuned = load_adapter(lm, tmp_path / "adapter")
    assert tuned.tokenizer is lm.tokenizer
    ids = torch.tensor([[5, 17, 42, 99]])
    with torch.no_grad():
        reference = untouched.model(ids).logits
        with base_model(tuned):
            assert torch.equal(lm.model(ids).logits, reference)
        assert not torch.allclose(tuned.model(ids).logits, reference, atol=1e-3)

    config = EvalConfig(paths=3, steps=4)
    methods = [parse_method(name) for name in ("direct", "ppr-seed1", "am-ppr-seed1")]
    rows = {row.method: row for row in question_rows([(0, question)], methods, config, Models(lm, tuned))}
    base_rows = {row.method: row for row in question_rows([(0, question)], methods[:2], config, Models(untouched))}
    # The base methods run without the adapter. (Not bit-exact: PEFT freezes the base weights, and with
    # requires_grad=False torch picks another matmul kernel for lm_head, which rounds differently.)
    for name in ("direct", "ppr-seed1"):
        for field in ("probs", "valid_mass", "thetas"):
            if getattr(base_rows[name], field) is not None:
                np.testing.assert_allclose(getattr(rows[name], field), getattr(base_rows[name], field), atol=1e-6)
    np.testing.assert_array_equal(rows["ppr-seed1"].answers, base_rows["ppr-seed1"].answers)
    am = rows["am-ppr-seed1"]  # θ̂_1 of the tuned model, not of the base model
    expected = run_methods(tuned, question, methods[2:], paths=3, steps=4, seed=config.seed,
                           template=config.template)[0]
    assert am.probs.tobytes() == expected.probs.numpy().tobytes()
    assert am.answers.shape == (3, 0) and am.thetas.shape == (3, 1, 4)
    base = run_methods(untouched, question, methods[2:], paths=3, steps=4, seed=config.seed,
                       template=config.template)[0]
    assert not np.allclose(am.probs, base.probs.numpy(), atol=1e-4)

    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        load_adapter(lm, tmp_path)
    with pytest.raises(ValueError, match="need an adapter"):
        question_rows([(0, question)], methods, config, Models(untouched))


# ----------------------------------------------------------------------------------------- quality control


def qc_row(path_means: list[float], method: str = "ppr") -> ResultRow:
    valid_mass = np.repeat(np.array(path_means)[:, None], 3, axis=1)
    return ResultRow("q", method, 0, 0, 2, np.array([0.7, 0.3]), valid_mass)


@pytest.mark.parametrize(
    ("path_means", "qc", "excluded"),
    [
        ([0.9, 0.4, 0.3], QualityControl(), True),  # 2 of 3 paths off-format
        ([0.9, 0.8, 0.4, 0.3], QualityControl(), False),  # exactly half is not more than half
        ([0.9, 0.4, 0.3], QualityControl(path_mass=0.25), False),
        ([0.9, 0.4, 0.3], QualityControl(max_fraction=0.7), False),
        ([0.49], QualityControl(), True),  # direct query: its one valid_mass is one path
        ([0.5], QualityControl(), False),
    ],
)
def test_quality_control_rule(path_means: list[float], qc: QualityControl, excluded: bool) -> None:
    assert qc.excludes(qc_row(path_means)) is excluded


def test_path_mean_is_over_steps() -> None:
    # Path 0 is off-format on average (mean 0.4) though its last step is fine; path 1 is fine.
    row = ResultRow("q", "ppr", 0, 0, 2, np.array([0.5, 0.5]), np.array([[0.1, 0.2, 0.9], [0.6, 0.6, 0.6]]))
    assert QualityControl(max_fraction=0.4).excludes(row)
    assert not QualityControl(max_fraction=0.5).excludes(row)


def test_scoring_excludes_and_counts() -> None:
    good = [ResultRow(f"q{i}", "ppr", i, i % 2, 2, np.array([0.8, 0.2]), np.full((3, 5), 0.9),
                      alternatives={"q_star_rb": np.array([0.6, 0.4])}) for i in range(4)]
    bad = ResultRow("q9", "ppr", 9, 1, 2, np.array([0.8, 0.2]), np.full((3, 5), 0.1),
                    alternatives={"q_star_rb": np.array([0.6, 0.4])})
    direct = [ResultRow(f"q{i}", "direct", i, 0, 2, np.array([0.9, 0.1]), np.array([[0.2]])) for i in range(5)]
    scores = score_rows([*good, bad, *direct], n_resamples=20)
    assert [(s.title, s.n, s.excluded, s.total) for s in scores] == [
        ("PPR + NoSEED", 4, 1, 5), ("PPR + NoSEED (RB)", 4, 1, 5), ("Direct-Query", 0, 5, 5)]
    assert scores[0].summary["ACC"].point == 0.5  # targets 0, 1, 0, 1, all predicted 0; q9 not counted
    assert scores[0].summary["n"] == 4
    assert scores[2].summary is None


# ----------------------------------------------------------------------------------------- configuration


def evaluate_config(*argv: str) -> EvalConfig:
    """The settings `beliefdrift evaluate ARGV` runs with."""
    args = build_parser().parse_args(["evaluate", *argv])
    return resolve_methods(settings_from(args, EvalConfig), given="methods" in args.given)


def test_config_layers_and_adapter_methods(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert evaluate_config() == resolve_methods(EvalConfig())
    assert canonical_methods(["direct,ppr-seed5", "ppr", "PPR"]) == ("ppr", "ppr-seed5", "direct")
    preset = tmp_path / "preset.yaml"
    preset.write_text("paths: 16\nsteps: 50\nmethods: [direct, am-ppr-seed1, ppr]\nn: 10\n")
    config = evaluate_config("--config", str(preset), "-N", "7")
    assert (config.paths, config.steps, config.n, config.methods) == (16, 7, 10, ["ppr", "direct"])
    assert "skipping am-ppr-seed1: no --adapter" in caplog.text
    assert evaluate_config("--config", str(preset), "--adapter", "lora").methods == ["ppr", "am-ppr-seed1", "direct"]
    with pytest.raises(ValueError, match="am-ppr-seed1 need --adapter"):
        evaluate_config("--methods", "am-ppr-seed1")
    with pytest.raises(ValueError, match=r"-N/--steps must be in \[1, 65536\], got 0"):
        evaluate_config("--steps", "0")


@pytest.mark.parametrize("name", ["paper.yaml", "cpu-default.yaml"])
def test_bundled_presets_resolve(name: str) -> None:
    config = evaluate_config("--config", str(REPO / "configs" / name), "--adapter", "lora-dir")
    assert config.methods[0] == "ppr" and config.methods[-1] == "direct"
    assert config.paths >= 8 and config.steps >= 20 and config.qc_path_mass == 0.5


# ----------------------------------------------------------------------------------------- CLI errors


def evaluate_args(model_dir: Path, out: Path, *extra: str) -> list[str]:
    return ["evaluate", "--model", str(model_dir), "--dataset", "demo", "-n", "2", "-J", "2", "-N", "2",
            "--methods", "direct", "--bootstrap", "10", "--out", str(out), *extra]


def test_config_mismatch_is_refused(tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(evaluate_args(tiny_model_dir, tmp_path)) == 0
    capsys.readouterr()
    assert main(evaluate_args(tiny_model_dir, tmp_path, "-N", "3", "--seed", "1")) == 2
    err = capsys.readouterr().err
    assert "different configuration" in err and "steps: stored 2, requested 3" in err and "seed: stored 0" in err
    assert "Traceback" not in err
    assert main(evaluate_args(tiny_model_dir, tmp_path)) == 0  # the same settings resume (nothing left to do)


def test_corrupt_store_is_a_clear_error(tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "run.sqlite").write_bytes(os.urandom(4096))
    assert main(evaluate_args(tiny_model_dir, tmp_path)) == 2
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("not a readable beliefdrift run store") == 2 and "Traceback" not in err


# ----------------------------------------------------------------------------------------- sharding

RUN_ARGS = ["--dataset", "demo", "-n", "8", "-J", "3", "-N", "4", "--qc-path-mass", "0", "--bootstrap", "50"]
RUN_ROWS = 8 * len(EvalConfig().methods)


def subprocess_env() -> dict[str, str]:
    # One intra-op thread everywhere: torchrun workers run with OMP_NUM_THREADS=1, and CPU kernels round
    # differently with different thread counts, so bit-for-bit comparisons need the same count.
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def evaluate_command(model_dir: Path, out: Path) -> list[str]:
    return ["-m", "beliefdrift", "evaluate", "--model", str(model_dir), *RUN_ARGS, "--out", str(out)]


def evaluate_in_process(model_dir: Path, out: Path) -> None:
    """`beliefdrift evaluate` in this process, on one thread like the subprocesses."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(evaluate_command(model_dir, out)[2:]) == 0
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def reference_run(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted single-process run."""
    out = tmp_path_factory.mktemp("reference")
    evaluate_in_process(tiny_model_dir, out)
    return out


@pytest.mark.multiprocess
def test_two_ranks_equal_one_process(tiny_model_dir: Path, tmp_path: Path, reference_run: Path) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               *evaluate_command(tiny_model_dir, tmp_path)]
    result = subprocess.run(command, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    messages = [line for line in result.stderr.splitlines() if line.startswith(("beliefdrift", "[rank0]"))]
    assert result.returncode == 0, "\n".join(messages) + result.stderr[-2000:]
    merged = stored_keys(tmp_path)
    assert len(merged) == RUN_ROWS
    assert merged == stored_keys(reference_run)
    with RunStore.open(tmp_path / "run.sqlite", create=False) as store, \
            RunStore.open(reference_run / "run.sqlite", create=False) as reference:
        assert store.config() == reference.config()
    assert (tmp_path / "tables.md").read_text() == (reference_run / "tables.md").read_text()
    assert result.stdout.count("**Table 1.**") == 1  # only rank 0 reports
