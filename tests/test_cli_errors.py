"""Faults and bad input through the CLI (`main(argv)` in this process): every user error is one line on stderr and
exit status 2 without a traceback; Ctrl-C is one line and 130; read-only, partial, corrupt and mismatched runs."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from beliefdrift.cli import main
from beliefdrift.store import RunStore, to_blob

FAST = ["-J", "2", "-N", "2"]


def csqa_line(qid: str, stem: str = "Which is a fruit?", options: int = 3) -> str:
    choices = [{"label": chr(ord("A") + i) if i < 26 else f"X{i}", "text": f"option {i}"} for i in range(options)]
    return json.dumps({"id": qid, "answerKey": "A", "question": {"stem": stem, "choices": choices}})


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def write_parquet(path: Path, rows: list[dict]) -> str:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def garbage_store(directory: Path) -> Path:
    (directory / "run.sqlite").write_bytes(os.urandom(4096))
    return directory


def error_line(capsys: pytest.CaptureFixture) -> str:
    """The one error line on stderr (progress bars and notes may precede it); no traceback."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1, err
    return lines[0]


def evaluate(model: Path, out: Path, *extra: str) -> list[str]:
    return ["evaluate", "--model", str(model), "--dataset", "demo", "-n", "2", *FAST, "--methods", "direct",
            "--bootstrap", "10", "--out", str(out), *extra]


# Each case: (argv builder (tiny model dir, tmp dir) -> argv, expected fragment of the error line).
BAD_INPUTS = {
    "unknown flag": (lambda m, t: ["drift", "--pathz", "3"], "unrecognized arguments: --pathz"),
    "not an integer": (lambda m, t: ["emd", "-J", "many"], "argument --paths/-J: invalid int value"),
    "cuda without a GPU": (lambda m, t: ["drift", "--model", str(m), "--device", "cuda", *FAST, "--out", str(t)],
                           "--device cuda: no CUDA GPU"),
    "cuda graphs on the cpu": (lambda m, t: evaluate(m, t, "--device", "cpu", "--cuda-graphs"),
                               "--cuda-graphs: the model is on cpu; CUDA graphs need --device cuda"),
    "unknown device": (lambda m, t: ["drift", "--model", str(m), "--device", "tpu7", "--out", str(t)],
                       "--device tpu7: unknown device"),
    "unknown model offline": (lambda m, t: ["drift", "--model", "no-such-model", "--out", str(t)],
                              "neither a registry name (smollm2-135m-instruct), a local directory, a .gguf file nor a "
                              "hub id in the local cache (HF_HUB_OFFLINE is set)"),
    "directory that is not a model": (lambda m, t: ["emd", "--model", str(t), "--out", str(t / "o")],
                                      "a directory but not a model (no config.json)"),
    "missing gguf": (lambda m, t: ["reasoning", "--model", str(t / "x.gguf"), "--dataset", "demo", "--out", str(t)],
                     "no such .gguf file"),
    "yaml value of the wrong type": (lambda m, t: ["evaluate", "--config", write(t / "c.yaml", "paths: abc\n"),
                                                   "--out", str(t)], "setting paths: expected an integer, got 'abc'"),
    "yaml unknown key": (lambda m, t: ["evaluate", "--config", write(t / "c.yaml", "pathz: 3\n"), "--out", str(t)],
                         "unknown settings ['pathz']"),
    "yaml not a mapping": (lambda m, t: ["evaluate", "--config", write(t / "c.yaml", "- 1\n"), "--out", str(t)],
                           "expected a mapping of settings"),
    "zero paths": (lambda m, t: evaluate(m, t, "-J", "0"), "-J/--paths must be at least 1, got 0"),
    "negative n": (lambda m, t: evaluate(m, t, "-n", "-1"), "-n/--n must be at least 0, got -1"),
    "negative n in drift": (lambda m, t: ["drift", "--model", str(m), "-n", "-2", "--out", str(t)],
                            "-n/--n must be at least 0, got -2"),
    "unknown dataset": (lambda m, t: ["drift", "--model", str(m), "--dataset", "nope", "--out", str(t)],
                        "unknown dataset 'nope'"),
    "empty data file": (lambda m, t: evaluate(m, t, "--dataset", write(t / "empty.jsonl", "")),
                        "empty.jsonl: no records in the file; expected a .jsonl or .parquet file in the CSQA/ARC "
                        "layout"),
    "empty csv file": (lambda m, t: evaluate(m, t, "--dataset", write(t / "empty.csv", "\n")),
                       "empty.csv: no questions in the file; expected"),
    "parquet file of other columns": (
        lambda m, t: evaluate(m, t, "--dataset", write_parquet(t / "data.parquet", [{"text": "hi", "label": 1}])),
        "data.parquet: columns 'text', 'label' match no known layout; expected a .parquet file in the CSQA/ARC layout"),
    "not a parquet file": (lambda m, t: evaluate(m, t, "--dataset", write(t / "data.parquet", "PAR1")),
                           "data.parquet: not a readable parquet file ("),
    "unknown layout": (lambda m, t: evaluate(m, t, "--dataset", write(t / "d.jsonl", '{"text": "hi"}\n')),
                       "d.jsonl:1: a record with keys 'text' matches no known layout"),
    "bad JSON": (lambda m, t: evaluate(m, t, "--dataset", write(t / "d.jsonl", csqa_line("a") + "\n{oops\n")),
                 "d.jsonl:2: bad JSON"),
    "27 options": (lambda m, t: evaluate(m, t, "--dataset", write(t / "d.jsonl", csqa_line("a") + "\n"
                                                                  + csqa_line("b", options=27) + "\n")),
                   "d.jsonl:2: 27 choices; at most 26 are supported (labels A-Z)"),
    "prompt longer than the context": (
        lambda m, t: evaluate(m, t, "--dataset", write(t / "d.jsonl", csqa_line("short") + "\n"
                                                       + csqa_line("long-one", stem="why? " * 900) + "\n")),
        "question long-one ("),
    "hf data file of other columns": (
        lambda m, t: evaluate(m, t, "--dataset", "hf:" + write(t / "d.jsonl", '{"text": "hi"}\n')),
        "d.jsonl/train: columns 'text' match no known layout"),
    "hf field mapping without an answer": (
        lambda m, t: evaluate(m, t, "--dataset", "hf:" + write(t / "d.jsonl", '{"q": "hi"}\n'), "--fields",
                              "question=q,choices=c"), "--fields question=q,choices=c: missing answer"),
    "model args without a value": (lambda m, t: evaluate(m, t, "--model-args", "oops"),
                                   "--model-args oops: 'oops' is not key=value"),
    "missing adapter": (lambda m, t: ["drift", "--model", str(m), "--methods", "am-ppr", "--out", str(t)],
                        "am-ppr needs --adapter"),
    "corrupt store": (lambda m, t: evaluate(m, garbage_store(t)), "not a readable beliefdrift run store"),
    "report without a store": (lambda m, t: ["report", str(t / "nothing")], "no run store at"),
    "reasoning past the context": (lambda m, t: ["reasoning", "--model", str(m), "--dataset", "demo", "-n", "1",
                                                 "--max-new-tokens", "5000", "--out", str(t)],
                                   "needs up to"),
    "reasoning with a template ending": (lambda m, t: ["reasoning", "--model", str(m), "--dataset", "demo",
                                                       "--template-ending", "paper", "--out", str(t)],
                                         "--template-ending: the pairs prompt has no question fence"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_and_exit_2(case: str, tiny_model_dir: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    if case == "cuda without a GPU" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv, fragment = BAD_INPUTS[case]
    assert main(argv(tiny_model_dir, tmp_path)) == 2
    line = error_line(capsys)
    assert fragment in line
    assert line.startswith("beliefdrift")
    assert (tmp_path / "run.sqlite").exists() == (case == "corrupt store")  # a failed start writes no run store
    assert not (tmp_path / "o").exists()


def test_long_prompts_are_named_then_skipped_and_counted(tiny_model_dir: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    data = write(tmp_path / "d.jsonl", csqa_line("short") + "\n" + csqa_line("long-one", stem="why? " * 900) + "\n")
    out = tmp_path / "run"
    assert main(evaluate(tiny_model_dir, out, "--dataset", data)) == 2
    assert "question long-one (" in error_line(capsys) and not out.exists()
    assert main(evaluate(tiny_model_dir, out, "--dataset", data, "--skip-long-prompts")) == 0
    captured = capsys.readouterr()
    assert "skipping 1 of 2 questions" in captured.err
    assert "1 questions skipped, prompt longer than the model's context (long-one)" in captured.out
    with RunStore.open(out / "run.sqlite", read_only=True) as store:
        assert store.done() == {("short", "direct")}


def test_debug_shows_the_traceback(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["--debug", "report", str(tmp_path)]) == 2
    assert main(["report", str(tmp_path), "--debug"]) == 2
    err = capsys.readouterr().err
    assert err.count("Traceback") == 2 and err.count("error: no run store") == 2


def test_other_data_or_model_is_refused_and_a_failed_start_pins_nothing(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "run"
    data = tmp_path / "d.jsonl"
    write(data, csqa_line("a") + "\n" + csqa_line("b") + "\n")
    assert main(evaluate(tiny_model_dir / "nope", out, "--dataset", str(data))) == 2  # wrong --model first
    assert not out.exists()
    assert main(evaluate(tiny_model_dir, out, "--dataset", str(data), "-n", "0")) == 0  # the corrected command
    with RunStore.open(out / "run.sqlite", read_only=True) as store:
        assert store.count() == 2  # -n 0: all questions
    write(data, csqa_line("a") + "\n" + csqa_line("b", stem="Which is a vegetable?") + "\n")
    capsys.readouterr()
    assert main(evaluate(tiny_model_dir, out, "--dataset", str(data), "-n", "0")) == 2
    line = error_line(capsys)
    assert "questions_sha256: stored" in line and "the questions differ" in line and "n: stored" not in line


@pytest.fixture
def finished_run(tiny_model_dir: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    assert main(evaluate(tiny_model_dir, out, "--methods", "direct", "ppr")) == 0
    return out


def test_partial_run_is_marked_in_every_table_and_on_stdout(finished_run: Path, capsys: pytest.CaptureFixture):
    with sqlite3.connect(finished_run / "run.sqlite") as db:
        db.execute("DELETE FROM alternatives WHERE method = 'ppr'")
        db.execute("DELETE FROM results WHERE rowid = (SELECT max(rowid) FROM results WHERE method = 'ppr')")
    capsys.readouterr()
    assert main(["report", str(finished_run), "--bootstrap", "10"]) == 0
    out = capsys.readouterr().out
    assert "is partial: 3 of 4 question × method results stored" in out
    for name in ("tables.md", "tables.tex"):
        assert (finished_run / name).read_text().count("partial: 3 of 4") >= 2  # Table 1 and Table 2


def test_corrupt_number_names_question_and_method(finished_run: Path, capsys: pytest.CaptureFixture) -> None:
    with sqlite3.connect(finished_run / "run.sqlite") as db:
        qid = db.execute("SELECT question_id FROM results WHERE method = 'direct' ORDER BY position").fetchone()[0]
        db.execute("UPDATE results SET probs = ? WHERE question_id = ? AND method = 'direct'",
                   (to_blob(np.array([np.nan, 0.5, 0.5, 0.0])), qid))
    capsys.readouterr()
    assert main(["report", str(finished_run), "--bootstrap", "10", "--qc-path-mass", "0"]) == 2
    assert f"question {qid!r}, method direct is not a probability vector" in error_line(capsys)


def test_read_only_run_is_reported_and_never_called_unreadable(
    finished_run: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("beliefdrift.store.writable", lambda path: False)  # an archive (chmod does not bind root)
    assert main(["report", str(finished_run), "--out", str(finished_run.parent / "report"), "--bootstrap", "10"]) == 0
    capsys.readouterr()
    assert main(evaluate(tiny_model_dir, finished_run, "--methods", "direct", "ppr")) == 2
    line = error_line(capsys)
    assert "the run store is read-only" in line and "remove" not in line


def test_ctrl_c_is_one_line_with_the_stored_count(tiny_model_dir: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch):
    import beliefdrift.evaluation as evaluation

    real, calls = evaluation.question_rows, []

    def interrupted_second_question(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluation, "question_rows", interrupted_second_question)
    out = tmp_path / "run"
    assert main(evaluate(tiny_model_dir, out)) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.rstrip().splitlines()[-1] == (f"beliefdrift evaluate: interrupted; 1 question × method results stored "
                                             f"in {out / 'run.sqlite'}; run the same command again to resume")
    monkeypatch.setattr(evaluation, "question_rows", real)
    assert main(evaluate(tiny_model_dir, out)) == 0
    with RunStore.open(out / "run.sqlite", read_only=True) as store:
        assert store.count() == 2


def test_sigint_in_a_real_process_exits_130_and_resumes(tiny_model_dir: Path, tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    out = tmp_path / "run"
    slow = ("-n", "30", "--methods", "ppr", "-N", "20")
    command = [sys.executable, "-m", "beliefdrift", *evaluate(tiny_model_dir, out, *slow)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    try:
        while not _stored(out / "run.sqlite"):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "run the same command again to resume" in err.splitlines()[-1]
    assert main(evaluate(tiny_model_dir, out, *slow)) == 0
    with RunStore.open(out / "run.sqlite", read_only=True) as store:
        assert store.count() == 30


def _stored(path: Path) -> int:
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            return db.execute("SELECT count(*) FROM results").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_cuda_out_of_memory_names_the_setting_to_lower(tiny_model_dir: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch):
    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr("beliefdrift.evaluation.question_rows", out_of_memory)
    assert main(evaluate(tiny_model_dir, tmp_path)) == 2
    assert "out of GPU memory; lower --batch-questions or -J/--paths" in error_line(capsys)
