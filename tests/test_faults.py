"""Faults on every resumable command (evaluate, drift, emd, train, reasoning), on real processes where it matters:
SIGKILL before anything is stored and after some units are, SIGINT, two processes on one directory, a read-only run
and damaged files, a flipped bit in a stored number, a run store from before the checksums. After a fault a command's
results equal an uninterrupted run's byte for byte (the stored units and output files, timings left out); a fault it
cannot recover from is one error line and exit status 2."""

from __future__ import annotations

import csv
import errno
import fnmatch
import json
import math
import os
import random
import re
import resource
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from beliefdrift.cli.main import main
from beliefdrift.config.diagnostics import DriftConfig, EMDCommandConfig
from beliefdrift.config.evaluate import EvalConfig
from beliefdrift.config.reasoning import ReasoningCommandConfig
from beliefdrift.config.train import TrainConfig

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
#: Only guards a hang: real processes on a loaded machine take what they take (the tests assert outcomes, not speeds).
DEADLINE_S = 1800
SHORT_TEMPLATE = "{question}\nAnswers ({choice_str}), one per line:\n"
RESUME_HINT = "run the same command again to resume"


# ---------------------------------------------------------------------------------------- reading a run


def query(out: Path, sql: str) -> list[tuple]:
    """Rows of `sql` on the run store in `out`, opened read-only ([] while it does not exist or is being created)."""
    path = out / "run.sqlite"
    if not path.is_file():
        return []
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10)) as db:
            return db.execute(sql).fetchall()
    except sqlite3.Error:
        return []


def files(out: Path, *names: str) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in names}


def stored_units(table: str) -> Callable[[Path], int]:
    """Question × method units stored in `table` of a run store."""
    def stored(out: Path) -> int:
        rows = query(out, f"SELECT count(*) FROM (SELECT DISTINCT question_id, method FROM {table})")
        return rows[0][0] if rows else 0
    return stored


def store_pinned(out: Path) -> bool:
    rows = query(out, "SELECT count(*) FROM config")
    return bool(rows and rows[0][0])


def evaluate_results(out: Path) -> dict[str, Any]:
    return {
        "config": query(out, "SELECT key, value FROM config ORDER BY key"),
        "results": query(out, "SELECT question_id, method, position, target, num_labels, probs, valid_mass_mean, "
                              "valid_mass, answers, seeds, thetas FROM results ORDER BY question_id, method"),
        "alternatives": query(out, "SELECT * FROM alternatives ORDER BY question_id, method, estimator"),
        **files(out, "tables.md", "tables.tex", "metrics.csv"),
    }


def records_results(out: Path) -> dict[str, Any]:
    return {
        "config": query(out, "SELECT key, value FROM config ORDER BY key"),
        "records": query(out, "SELECT question_id, method, quantity, value FROM records "
                              "ORDER BY question_id, method, quantity"),
        **files(out, "records.csv", "summary.md", "summary.json"),
    }


def reasoning_results(out: Path) -> dict[str, Any]:
    """The records and summary of a reasoning run without its timings and the figure paths (which name `out`)."""
    summary = json.loads((out / "summary.json").read_text())
    summary.pop("figure")
    return {
        "config": query(out, "SELECT key, value FROM config ORDER BY key"),
        "records": query(out, "SELECT question_id, method, quantity, value FROM records WHERE quantity != 'seconds' "
                              "ORDER BY question_id, method, quantity"),
        "records.csv": [line for line in (out / "records.csv").read_text().splitlines() if ",seconds," not in line],
        "summary.json": summary,
    }


def checkpoint_step(out: Path) -> int:
    """The step of the last checkpoint of a training run (0: none yet)."""
    names = (path.name for path in (out / "checkpoints").glob("checkpoint-*"))
    return max((int(m[1]) for name in names if (m := re.fullmatch(r"checkpoint-(\d+)", name))), default=0)


def train_results(out: Path) -> dict[str, Any]:
    """The final adapter, identity, checkpoints and log of a training run, its wall times left out (peft writes
    the adapter config's target modules in set order, which changes from process to process)."""
    with open(out / "log.csv", newline="") as log:
        rows = [{key: value for key, value in row.items() if key != "seconds"} for row in csv.DictReader(log)]
    adapter_config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    adapter_config["target_modules"] = sorted(adapter_config["target_modules"])
    return {
        "log": rows,
        "checkpoints": sorted(path.name for path in (out / "checkpoints").iterdir()),
        "adapter_config": adapter_config,
        **files(out, "identity.json", "adapter/adapter_model.safetensors"),
    }


# ---------------------------------------------------------------------------------------- the commands


@dataclass(frozen=True)
class Damage:
    """Random bytes over a file of a finished run after its first `keep` bytes, and the error line naming it."""

    file: str
    error: str
    keep: int = 0


STORE_DAMAGES = (Damage("run.sqlite", "run.sqlite: not a readable beliefdrift run store"),
                 Damage("run.sqlite", "run.sqlite: not a readable beliefdrift run store", keep=8192))  # past the schema
CHECKPOINT = "checkpoints/checkpoint-000004"
TRAIN_DAMAGES = (
    *(Damage(f"{CHECKPOINT}/{name}", "checkpoint-000004: not a readable checkpoint")
      for name in ("adapter/adapter_model.safetensors", "optimizer.rank0.pt", "scheduler.pt", "rng.rank0.pt",
                   "state.json")),
    Damage("identity.json", "identity.json: not a readable run identity"),
    Damage("rollouts/rollouts.jsonl", "rollouts: not a readable rollout dataset"),
    Damage("rollouts/meta.json", "rollouts: not a readable rollout dataset"),
)


@dataclass(frozen=True)
class Command:
    """A resumable command on the tiny model, sized so that a real process can be stopped between its units."""

    argv: Callable[[Path, str], list[str]]  # (model directory, short template) -> arguments without --out
    units: int  # units of a complete run (question × method results; train: updates, one checkpoint each)
    stored: Callable[[Path], int]  # units stored so far in an output directory
    pinned: Callable[[Path], bool]  # the run's identity is written (before any unit is)
    results: Callable[[Path], dict[str, Any]]  # what every run must reproduce
    damages: tuple[Damage, ...] = STORE_DAMAGES


COMMANDS = {
    "evaluate": Command(
        lambda m, t: ["evaluate", "--model", str(m), "--dataset", "demo", "-n", "4", "-J", "2", "-N", "3",
                      "--methods", "direct", "ppr", "--bootstrap", "10", "--qc-path-mass", "0"],
        8, stored_units("results"), store_pinned, evaluate_results),
    "drift": Command(
        lambda m, t: ["drift", "--model", str(m), "--dataset", "demo", "-n", "4", "-J", "2", "-N", "3",
                      "--plot-questions", "0"],
        8, stored_units("records"), store_pinned, records_results),
    "emd": Command(
        lambda m, t: ["emd", "--model", str(m), "--dataset", "demo", "-n", "3", "-J", "2", "-N", "3", "-K", "3",
                      "--prefix-lengths", "0", "1", "--top-k", "2", "--burn-in", "1", "-k", "2", "--distance", "l1",
                      "--noise-floor-replicates", "5"],
        6, stored_units("records"), store_pinned, records_results),
    "train": Command(
        lambda m, t: ["train", "--model", str(m), "--template", t, "--dataset", "demo", "-n", "1", "--prefix-lengths",
                      "0", "--paths", "4", "--micro-batch", "2", "--grad-accum", "2", "--epochs", "1",
                      "--steps-per-group", "4", "--warmup-steps", "1", "--learning-rate", "1e-2", "--save-steps", "1",
                      "--eval-n", "0", "--dtype", "float32"],
        4, checkpoint_step, lambda out: (out / "identity.json").is_file(), train_results, TRAIN_DAMAGES),
    "reasoning": Command(
        lambda m, t: ["reasoning", "--model", str(m), "--dataset", "demo", "-n", "3", "-J", "2", "-N", "2", "-m", "1",
                      "--max-new-tokens", "40", "--seed-max-new-tokens", "20", "--max-solution-tokens", "10",
                      "--tau", "1"],
        6, stored_units("records"), store_pinned, reasoning_results),
}


# ---------------------------------------------------------------------------------------- running them


def run_here(argv: list[str]) -> int:
    """`beliefdrift …` in this process, on one thread like the subprocesses (results depend on the thread count)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return main(argv)
    finally:
        torch.set_num_threads(threads)


def interruptible() -> None:
    """In the child before it starts: SIGINT as a terminal sends it, also where the tests run as a background job
    (which ignores SIGINT, and a child would inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(argv: list[str], log: Path) -> subprocess.Popen:
    """`python -m beliefdrift …` as a real process, its stderr into `log`."""
    with open(log, "w") as err:
        return subprocess.Popen([sys.executable, "-m", "beliefdrift", *argv], env=ENV, stdout=subprocess.DEVNULL,
                                stderr=err, preexec_fn=interruptible)


def one_error_line(err: str, name: str) -> str:
    """The one line of the command's own message on stderr (progress bars and notes aside); no traceback."""
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith(f"beliefdrift {name}: ")]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


@dataclass(frozen=True)
class Stopped:
    """A real run stopped by a signal: its output directory, stderr, exit status and units stored at the end."""

    out: Path
    err: str
    status: int
    stored: int


#: Where the interrupted runs are stopped: (condition on the command and output directory, signal).
STOPS: dict[str, tuple[Callable[[Command, Path], bool], signal.Signals]] = {
    "before any unit": (lambda command, out: command.pinned(out), signal.SIGKILL),
    "after a unit": (lambda command, out: command.stored(out) >= 1, signal.SIGKILL),
    "ctrl-c": (lambda command, out: command.stored(out) >= 1, signal.SIGINT),
}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("template") / "short.txt"
    path.write_text(SHORT_TEMPLATE)
    return str(path)


@pytest.fixture(scope="module", params=list(COMMANDS))
def name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def argv(name: str, tiny_model_dir: Path, template: str) -> list[str]:
    return COMMANDS[name].argv(tiny_model_dir, template)


@pytest.fixture(scope="module")
def reference(name: str, argv: list[str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted run of the command, the one every fault test compares with."""
    out = tmp_path_factory.mktemp(f"reference-{name}")
    assert run_here([*argv, "--out", str(out)]) == 0
    assert COMMANDS[name].stored(out) == COMMANDS[name].units
    return out


@pytest.fixture(scope="module")
def stopped(name: str, argv: list[str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Stopped]:
    """Real runs of the command, one per entry of `STOPS`, started together and each stopped at its point."""
    command, root = COMMANDS[name], tmp_path_factory.mktemp(f"stopped-{name}")
    outs = {stop: root / stop.replace(" ", "-") for stop in STOPS}
    processes = {stop: start([*argv, "--out", str(out)], out.with_suffix(".log")) for stop, out in outs.items()}
    waiting, deadline = set(STOPS), time.monotonic() + DEADLINE_S
    try:
        while waiting:
            for stop in sorted(waiting):
                condition, signum = STOPS[stop]
                if processes[stop].poll() is not None:
                    pytest.fail(f"{name} ended (status {processes[stop].returncode}) before it could be stopped "
                                f"{stop}: {outs[stop].with_suffix('.log').read_text()[-3000:]}")
                if condition(command, outs[stop]):
                    processes[stop].send_signal(signum)
                    waiting.discard(stop)
            assert time.monotonic() < deadline, f"{name}: not stopped within {DEADLINE_S} s: {waiting}"
            time.sleep(0.005)
        statuses = {stop: process.wait(timeout=DEADLINE_S) for stop, process in processes.items()}
    finally:
        for process in processes.values():
            process.kill()
    return {stop: Stopped(out, out.with_suffix(".log").read_text(), statuses[stop], command.stored(out))
            for stop, out in outs.items()}


# ---------------------------------------------------------------------------------------- the faults


@pytest.mark.slow
def test_sigkill_before_and_after_units_are_stored_resumes_to_the_same_results(
    name: str, argv: list[str], reference: Path, stopped: dict[str, Stopped]
) -> None:
    command = COMMANDS[name]
    early, late = stopped["before any unit"], stopped["after a unit"]
    assert early.status == late.status == -signal.SIGKILL
    assert early.stored == 0 and 1 <= late.stored < command.units
    if name == "evaluate":  # a question's methods are stored together; the tables are written once all are
        assert late.stored % 2 == 0 and not (late.out / "tables.md").exists()
    for run in (early, late):
        assert run_here([*argv, "--out", str(run.out)]) == 0  # the same command again
        assert command.results(run.out) == command.results(reference)


@pytest.mark.slow
def test_sigint_exits_130_with_one_line_and_the_same_command_resumes(
    name: str, argv: list[str], reference: Path, stopped: dict[str, Stopped]
) -> None:
    command, run = COMMANDS[name], stopped["ctrl-c"]
    assert run.status == 130, run.err[-3000:]
    line = one_error_line(run.err, name)
    assert line == run.err.rstrip().splitlines()[-1] and line.endswith(RESUME_HINT)
    assert 1 <= run.stored < command.units
    if name == "train":
        checkpoint = run.out / "checkpoints" / f"checkpoint-{run.stored:06d}"
        assert f"the last checkpoint is {checkpoint} (step {run.stored} of {command.units})" in line
    else:
        assert f"{run.stored} question × method results stored in {run.out / 'run.sqlite'}" in line
    assert run_here([*argv, "--out", str(run.out)]) == 0
    assert command.results(run.out) == command.results(reference)


@pytest.mark.slow
def test_two_processes_on_one_directory_end_with_one_runs_results(
    name: str, argv: list[str], reference: Path, tmp_path: Path
) -> None:
    """The diagnostic commands and evaluate share the work (each skips what the other stored); train refuses a
    directory another process is training in, naming it (unless that one has finished by then)."""
    out = tmp_path / "run"
    logs = [tmp_path / f"{i}.log" for i in range(2)]
    processes = [start([*argv, "--out", str(out)], log) for log in logs]
    statuses = [process.wait(timeout=DEADLINE_S) for process in processes]
    for status, log in zip(statuses, logs, strict=True):
        if name == "train" and status == 2:
            line = one_error_line(log.read_text(), name)
            assert re.search(rf"{re.escape(str(out))} is in use by another beliefdrift train \(process \d+\)", line)
        else:
            assert status == 0, log.read_text()[-3000:]
    assert statuses.count(0) >= 1
    assert COMMANDS[name].results(out) == COMMANDS[name].results(reference)


def test_read_only_run_is_one_line_and_exit_2(name: str, argv: list[str], reference: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    monkeypatch.setattr("beliefdrift.runs.store.writable", lambda path: False)  # an archive (chmod does not bind root)
    capsys.readouterr()
    assert run_here([*argv, "--out", str(out)]) == 2
    line = one_error_line(capsys.readouterr().err, name)
    assert f"{out}" in line and "is read-only" in line and "not a readable" not in line
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before


def test_damaged_files_are_one_line_and_exit_2(name: str, argv: list[str], reference: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    for i, damage in enumerate(COMMANDS[name].damages):
        out = tmp_path / str(i)
        shutil.copytree(reference, out)
        for sidecar in ("run.sqlite-wal", "run.sqlite-shm"):  # a closed store has none
            (out / sidecar).unlink(missing_ok=True)
        path = out / damage.file
        size = max(path.stat().st_size, 4096)
        path.write_bytes(path.read_bytes()[: damage.keep] + random.Random(i).randbytes(size - damage.keep))
        capsys.readouterr()
        assert run_here([*argv, "--out", str(out)]) == 2, damage
        line = one_error_line(capsys.readouterr().err, name)
        assert f"{out}" in line and damage.error in line, (damage, line)


def test_every_file_a_command_writes_is_declared(name: str, reference: Path) -> None:
    """`Settings.outputs` (what an input file may not be, lest the command replace it) names every file the command
    writes into its output directory."""
    settings = {"evaluate": EvalConfig, "drift": DriftConfig, "emd": EMDCommandConfig, "train": TrainConfig,
                "reasoning": ReasoningCommandConfig}[name]
    written = [path.relative_to(reference).as_posix() for path in reference.rglob("*") if path.is_file()]
    assert written and [file for file in written if not any(fnmatch.fnmatchcase(file, pattern)
                                                            for pattern in settings.outputs)] == []


def limited_to(size: int) -> Callable[[], None]:
    """In the child before it starts: no file it writes may grow past `size` bytes (EFBIG, as a full disk gives
    ENOSPC), the signal that limit raises ignored so that the write fails instead."""
    def limit() -> None:
        interruptible()
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    return limit


def test_a_write_cut_short_leaves_every_output_whole(name: str, reference: Path, tmp_path: Path) -> None:
    """`report` on a run whose outputs exist, where the disk takes every table but no figure: the figure it cannot
    write is named, every file is the one it was (none truncated in place), and no temporary is left."""
    if name != "evaluate":
        pytest.skip("report's outputs: evaluate's run")
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    figures = [name for name in before if name.endswith(".png")]
    limit = max(len(data) for name, data in before.items() if name.endswith((".md", ".tex", ".csv"))) + 1
    assert figures and all(len(before[figure]) > limit for figure in figures)
    result = subprocess.run([sys.executable, "-m", "beliefdrift", "report", str(out), "--bootstrap", "10",
                             "--qc-path-mass", "0"], env=ENV, capture_output=True, text=True,
                            preexec_fn=limited_to(limit), timeout=DEADLINE_S)
    assert result.returncode == 2, result.stderr[-3000:]
    line = one_error_line(result.stderr, "report")
    assert "File too large" in line and re.search(rf"{re.escape(str(out))}/reliability-[\w-]+\.png", line), line
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


def test_train_on_a_full_disk_is_one_line_and_resumes(name: str, argv: list[str], reference: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk that refuses a checkpoint's file: one line naming the checkpoint and the one a resume starts from, no
    temporary left behind, and the same command, once there is room, ends with the reference's results. Two
    refusals: a real process whose files may not grow past 100 kB (EFBIG inside safetensors' writer, at the first
    checkpoint's adapter), and ENOSPC at the third checkpoint's optimizer state, half written, in this process."""
    if name != "train":
        pytest.skip("train's checkpoints (a full disk under the run store: tests/test_store.py)")
    out = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "beliefdrift", *argv, "--out", str(out)], env=ENV,
                            capture_output=True, text=True, preexec_fn=limited_to(100_000), timeout=DEADLINE_S)
    assert result.returncode == 2, result.stderr[-3000:]
    line = one_error_line(result.stderr, "train")
    assert line.endswith(f"{out}/checkpoints/checkpoint-000001: cannot write it (File too large); nothing of it is "
                         "kept; free some space and run the same command again to resume from the start"), line
    write_bytes = Path.write_bytes

    def disk_full_at_step_3(path: Path, data: bytes) -> int:
        if path.name == "optimizer.rank0.pt" and path.parent.name == ".checkpoint-000003.tmp":
            write_bytes(path, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write_bytes(path, data)

    monkeypatch.setattr(Path, "write_bytes", disk_full_at_step_3)
    capsys.readouterr()
    assert run_here([*argv, "--out", str(out)]) == 2
    line = one_error_line(capsys.readouterr().err, "train")
    assert line.endswith(f"checkpoint-000003: cannot write it (No space left on device); nothing of it is kept; free "
                         f"some space and run the same command again to resume from {out}/checkpoints/"
                         "checkpoint-000002"), line
    assert [path for path in out.rglob("*") if path.name.endswith(".tmp")] == [] and checkpoint_step(out) == 2
    monkeypatch.undo()
    assert run_here([*argv, "--out", str(out)]) == 0
    assert COMMANDS[name].results(out) == COMMANDS[name].results(reference)


def test_train_refuses_a_directory_another_process_holds(tiny_model_dir: Path, template: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    argv = [*COMMANDS["train"].argv(tiny_model_dir, template), "--out", str(tmp_path)]
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from pathlib import Path; "
                               "from beliefdrift.files import lock_directory; "
                               "lock = lock_directory(Path(sys.argv[1]), 'train'); print('held', flush=True); "
                               "sys.stdin.read()", str(tmp_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        capsys.readouterr()
        assert run_here(argv) == 2
        line = one_error_line(capsys.readouterr().err, "train")
        assert f"{tmp_path} is in use by another beliefdrift train (process {holder.pid})" in line
        assert not (tmp_path / "rollouts").exists() and not (tmp_path / "identity.json").exists()
    finally:
        holder.communicate("")
    assert run_here(argv) == 0  # the lock ended with its process
    assert not (tmp_path / ".beliefdrift.lock").exists()  # and a finished run leaves no lock file naming it


# ---------------------------------------------------------------------------------------- stored numbers


def flip_float_bit(value: Any) -> tuple[Any, bool]:
    """`value` (parsed JSON) with a low mantissa bit of its first non-integral float flipped, and whether it had one."""
    if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
        bits = struct.unpack("<q", struct.pack("<d", value))[0] ^ 0b1000
        return struct.unpack("<d", struct.pack("<q", bits))[0], True
    if isinstance(value, list):
        for i, item in enumerate(value):
            flipped, done = flip_float_bit(item)
            if done:
                return [*value[:i], flipped, *value[i + 1 :]], True
    if isinstance(value, dict):
        for key, item in value.items():
            flipped, done = flip_float_bit(item)
            if done:
                return {**value, key: flipped}, True
    return value, False


def flip_a_stored_number(out: Path, name: str) -> tuple[str, str]:
    """Flip one mantissa bit of a number the command stored for its second question (a probability in evaluate's
    `results`, a recorded float in the others' `records`); (question id, method) of the unit."""
    with closing(sqlite3.connect(out / "run.sqlite")) as db, db:
        if name == "evaluate":
            qid, method, blob = db.execute("SELECT question_id, method, probs FROM results WHERE method = 'ppr' "
                                           "ORDER BY position LIMIT 1 OFFSET 1").fetchone()
            raw = bytearray(blob)
            raw[-8] ^= 0b1000  # the last float64's lowest mantissa byte
            db.execute("UPDATE results SET probs = ? WHERE question_id = ? AND method = ?", (bytes(raw), qid, method))
            return qid, method
        rows = db.execute("SELECT rowid, question_id, method, value FROM records ORDER BY rowid").fetchall()
        second = sorted({qid for _, qid, _, _ in rows}, key=[qid for _, qid, _, _ in rows].index)[1]
        for rowid, qid, method, text in rows:
            flipped, done = flip_float_bit(json.loads(text))
            if qid == second and done:
                db.execute("UPDATE records SET value = ? WHERE rowid = ?", (json.dumps(flipped), rowid))
                return qid, method
    raise AssertionError(f"{name}: no stored float to flip")


def test_a_flipped_bit_in_a_stored_number_is_refused(name: str, argv: list[str], reference: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    """One mantissa bit is still a valid number, which SQLite reads back without a word: the store's checksum tells,
    and the command refuses naming the question × method."""
    if name == "train":
        pytest.skip("train keeps no run store (its damaged files: test_damaged_files_are_one_line_and_exit_2)")
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    qid, method = flip_a_stored_number(out, name)
    capsys.readouterr()
    assert run_here([*argv, "--out", str(out)]) == 2
    line = one_error_line(capsys.readouterr().err, name)
    assert f"{out / 'run.sqlite'}: the stored " in line
    assert f"of question {qid!r}, method {method} does not match its checksum" in line


def test_a_store_from_before_the_checksums_resumes(name: str, argv: list[str], reference: Path,
                                                   tmp_path: Path) -> None:
    """A partial run store of schema version 2 (no checksums) resumes to the same results, its identity unchanged,
    and holds a checksum per unit afterwards."""
    if name == "train":
        pytest.skip("train keeps no run store")
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    table = "results" if name == "evaluate" else "records"
    with closing(sqlite3.connect(out / "run.sqlite")) as db, db:
        last = db.execute(f"SELECT question_id FROM {table} ORDER BY rowid DESC LIMIT 1").fetchone()[0]
        for stored in ("alternatives", "results", "records"):
            db.execute(f"DELETE FROM {stored} WHERE question_id = ?", (last,))
        db.execute("DROP TABLE checksums")
        db.execute("PRAGMA user_version = 2")
    identity = query(out, "SELECT key, value FROM config ORDER BY key")
    assert 0 < COMMANDS[name].stored(out) < COMMANDS[name].units
    assert run_here([*argv, "--out", str(out)]) == 0
    assert COMMANDS[name].results(out) == COMMANDS[name].results(reference)
    assert query(out, "SELECT key, value FROM config ORDER BY key") == identity
    assert query(out, "PRAGMA user_version") == [(4,)]
    assert query(out, f"SELECT count(*) FROM checksums WHERE kind = '{table}'") == [(COMMANDS[name].stored(out),)]
