"""`beliefdrift demo` end to end on the tiny model: table, metric tables, EMD section and drift figure; an
interrupted demo resumes with the questions it had finished."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from table_checks import table_problems

import beliefdrift.engine.methods as methods
from beliefdrift.cli.main import main

ROOT = Path(__file__).resolve().parents[1]


def test_demo_writes_summary_and_figure(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "demo"
    code = main(["demo", "--model", str(tiny_model_dir), "--n", "2", "-J", "2", "-N", "3", "--emd-questions", "1",
                 "--reasoning-questions", "0", "--out", str(out)])
    assert code == 0
    summary = (out / "summary.md").read_text()
    for method in ("Direct-Query", "PPR + NoSEED", "PPR + SEED_1", "PPR + SEED_5"):
        assert method in summary
    assert "**Table 1.**" in summary and "Expected martingale drift" in summary
    assert (out / "marginal_drift.png").stat().st_size > 0 and (out / "marginal_drift.pdf").exists()
    # Every table titled and ≤ 100 columns. The first says it counts every question and how many quality control
    # drops from Tables 1 and 2 (here all: the random model's label mass is ~1%), which a warning says at run time.
    assert table_problems(summary) == []
    assert summary.startswith("**Demo summary.** Each method on all 2 questions, before quality control")
    assert "| method | accuracy | mean confidence | mean valid_mass | QC excl. |" in summary
    assert "| PPR + NoSEED | " in summary and summary.count(" | 2/2 |") == 4
    err = capsys.readouterr().err
    assert "QUALITY CONTROL EXCLUDED ALL 2 QUESTIONS OF PPR + NoSEED" in err
    wrote = err.strip().splitlines()[-1]  # a message, not data: on stderr; it names everything written
    assert wrote.startswith(f"wrote to {out}: run.sqlite") and "summary.md" in wrote and "marginal_drift" in wrote


def test_an_interrupted_demo_keeps_its_finished_questions(tiny_model_dir, tmp_path, monkeypatch, capsys):
    args = ["demo", "--model", str(tiny_model_dir), "--n", "3", "-J", "2", "-N", "3", "--emd-questions", "0",
            "--reasoning-questions", "0"]
    assert main([*args, "--out", str(tmp_path / "whole")]) == 0
    run_methods, calls = methods.run_methods, []

    def interrupt_at_the_second(lm, question, *rest, **options):  # Ctrl-C while the second question runs
        calls.append(question.id)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return run_methods(lm, question, *rest, **options)

    monkeypatch.setattr(methods, "run_methods", interrupt_at_the_second)
    out = tmp_path / "resumed"
    assert main([*args, "--out", str(out)]) == 130
    assert "4 question × method results stored" in capsys.readouterr().err
    assert main([*args, "--out", str(out)]) == 0
    assert len(calls) == 4 and calls[2] == calls[1]  # the first question is not run again
    assert (out / "summary.md").read_text() == (tmp_path / "whole" / "summary.md").read_text()
    assert main([*args, "-J", "3", "--out", str(out)]) == 2  # other settings: refused, not mixed in
    assert "paths: stored 2, requested 3" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_demo_runs_one_thread_unless_told_otherwise(tmp_path: Path) -> None:
    """`make demo` on a shared 2-core machine must not start a torch thread per core (they stall on busy cores): it
    sets OMP_NUM_THREADS=1 where the caller did not set it, and keeps the caller's value. The venv is a stand-in whose
    `beliefdrift` prints the variable it was started with."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    stand_in = venv / "bin" / "beliefdrift"
    stand_in.write_text('#!/bin/sh\necho "threads=$OMP_NUM_THREADS args=$*"\n')
    stand_in.chmod(0o755)
    (venv / ".installed").touch()  # newer than pyproject.toml: `setup` has nothing to do
    os.utime(venv / ".installed", (time.time() + 60, time.time() + 60))
    env = {key: value for key, value in os.environ.items() if key not in ("OMP_NUM_THREADS", "MAKEFLAGS")}

    def demo(**extra: str) -> str:
        result = subprocess.run(["make", "-s", "-C", str(ROOT), "demo", f"VENV={venv}"], env={**env, **extra},
                                capture_output=True, text=True, check=True)
        return result.stdout.strip()

    assert demo() == "threads=1 args=demo"
    assert demo(OMP_NUM_THREADS="2") == "threads=2 args=demo"
