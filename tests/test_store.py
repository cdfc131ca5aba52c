"""The SQLite run store: bit-exact round trips, atomic questions, config pinning, clear errors, concurrent writers."""

from __future__ import annotations

import io
import json
import multiprocessing
import sqlite3
import subprocess
import sys
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from store_rows import make_row, write_share

from beliefdrift.runs.scoring import score_rows
from beliefdrift.runs.store import (
    BLOB_COLUMNS,
    CHECKSUM_INSERT,
    ResultRow,
    RunStore,
    StoreError,
    checksum_row,
    from_blob,
    records_parts,
    result_parts,
    to_blob,
)


def assert_rows_equal(a: ResultRow, b: ResultRow) -> None:
    for name in ("question_id", "method", "position", "target", "num_labels", "seconds"):
        assert getattr(a, name) == getattr(b, name), name
    for name in ("probs", "valid_mass", "answers", "seeds", "thetas"):
        x, y = getattr(a, name), getattr(b, name)
        if x is None:
            assert y is None, name
            continue
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert x.tobytes() == y.tobytes(), name  # bit-exact
    assert a.alternatives.keys() == b.alternatives.keys()
    for key in a.alternatives:
        assert a.alternatives[key].tobytes() == b.alternatives[key].tobytes()


def test_round_trip_is_bit_exact_and_ordered(tmp_path: Path) -> None:
    rows = [make_row("q2", "ppr", 1, seed=1), make_row("q1", "ppr-seed5", 0, seed=2), make_row("q1", "ppr", 0, seed=3)]
    direct = ResultRow("q1", "direct", 0, 2, 5, np.array([0.1, 0.2, 0.3, 0.2, 0.2]), np.array([[0.9]]))
    with RunStore.open(tmp_path / "run.sqlite") as store:
        store.add(rows[:1])
        store.add([*rows[1:], direct])
        assert store.count() == 4
        assert store.done() == {("q2", "ppr"), ("q1", "ppr-seed5"), ("q1", "ppr"), ("q1", "direct")}
    with RunStore.open(tmp_path / "run.sqlite", create=False) as store:
        stored = store.rows()
    expected = [direct, rows[2], rows[1], rows[0]]  # by position, then method name
    assert [(r.question_id, r.method) for r in stored] == [(r.question_id, r.method) for r in expected]
    for got, want in zip(stored, expected, strict=True):
        assert_rows_equal(got, want)
    assert stored[0].answers is None and stored[0].alternatives == {}
    assert stored[1].valid_mass_mean == pytest.approx(float(rows[2].valid_mass.mean()))
    np.testing.assert_array_equal(stored[1].path_valid_mass, rows[2].valid_mass.mean(axis=1))


@pytest.mark.parametrize("array", [
    np.array([0.1, 0.2, 0.7]), np.arange(12, dtype=np.int64).reshape(3, 4), np.zeros((2, 0, 5), dtype=np.float32),
    np.array(3.5), np.arange(6, dtype=">f4").reshape(2, 3), np.asfortranarray(np.eye(3)), np.array([True, False]),
])
def test_from_blob_reads_what_np_load_reads(array: np.ndarray) -> None:
    blob = to_blob(array)
    got, want = from_blob(blob), np.load(io.BytesIO(blob), allow_pickle=False)
    assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
    assert got.flags.writeable
    with pytest.raises(ValueError):
        from_blob(blob[:-1] if array.size else blob[:20])


def test_the_light_read_scores_like_the_full_read(tmp_path: Path) -> None:
    rows = [make_row(f"q{i}", method, i, seed=2 * i + k)
            for i in range(30) for k, method in enumerate(["ppr", "ppr-seed5"])]
    with RunStore.open(tmp_path / "run.sqlite") as store:
        store.add(rows)
        full, light = store.rows(), store.rows(trajectories=False)
    for got, want in zip(light, full, strict=True):
        assert got.answers is None and got.seeds is None and got.thetas is None
        assert_rows_equal(replace(got, answers=want.answers, seeds=want.seeds, thetas=want.thetas), want)
    light_scores, full_scores = score_rows(light, n_resamples=50), score_rows(full, n_resamples=50)
    assert [s.excluded for s in full_scores] != [0] * len(full_scores)  # QC has rows to drop
    np.testing.assert_equal([s.summary for s in light_scores], [s.summary for s in full_scores])


def test_a_question_is_written_all_or_nothing(tmp_path: Path) -> None:
    with RunStore.open(tmp_path / "run.sqlite") as store:
        store.add([make_row("q1", "ppr", 0)])
        with pytest.raises(StoreError, match="given twice"):
            store.add([make_row("q2", "ppr", 1), make_row("q2", "ppr", 1)])
        assert store.done() == {("q1", "ppr")}  # q2 rolled back with the failing transaction
        assert len(store.rows()[0].alternatives) == 2


def test_a_unit_stored_by_another_process_keeps_its_first_result(tmp_path: Path) -> None:
    first, again = make_row("q1", "ppr", 0, seed=1), make_row("q1", "ppr", 0, seed=2)
    with RunStore.open(tmp_path / "run.sqlite") as store:
        assert store.add([first]) == 1
        assert store.add([again, make_row("q1", "direct", 0)]) == 1  # only the direct row is new
        assert store.done() == {("q1", "ppr"), ("q1", "direct")}
        assert_rows_equal(store.rows()[1], first)


def test_read_only_open_never_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "run.sqlite"
    with RunStore.open(path) as store:
        store.add([make_row("q1", "ppr", 0)])
    with RunStore.open(path, read_only=True) as store:
        assert store.units() == 1
        with pytest.raises(StoreError, match="is read-only"):
            store.add([make_row("q2", "ppr", 1)])
    # a read-only directory (an archive): readers open it immutable, writers are told it is read-only
    monkeypatch.setattr("beliefdrift.runs.store.writable", lambda p: False)
    with RunStore.open(path, read_only=True) as store:
        assert store.done() == {("q1", "ppr")}
    with pytest.raises(StoreError, match="is read-only") as err:
        RunStore.open(path)
    assert "remove" not in str(err.value) and "beliefdrift report" in str(err.value)


def test_pages_damaged_behind_an_intact_schema_are_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    with RunStore.open(path) as store:
        for i in range(30):
            store.add([make_row(f"q{i}", "ppr", i, seed=i)])
            store.add_records(f"q{i}", {"ppr": {"marginal_shift": [0.5] * 50}})
    data = path.read_bytes()
    path.write_bytes(data[:4096] + np.random.default_rng(0).bytes(len(data) - 4096))  # page 1: header and schema
    with RunStore.open(path, create=False) as store:
        for read in (store.done, store.rows, store.record_units, lambda: store.records("q1", "ppr")):
            with pytest.raises(StoreError, match=r"run\.sqlite: not a readable beliefdrift run store \(database disk "
                                                 r"image is malformed\)"):
                read()


def test_a_corrupt_array_names_question_and_method(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    with RunStore.open(path) as store:
        store.add([make_row("q1", "ppr", 0)])
    with sqlite3.connect(path) as db:
        db.execute("UPDATE results SET valid_mass = x'00ff'")
    with RunStore.open(path, create=False) as store, pytest.raises(StoreError, match="question 'q1', method ppr"):
        store.rows()


def test_changed_numbers_fail_their_checksums(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    with RunStore.open(path) as store:
        store.add([make_row("q1", "ppr", 0), make_row("q2", "ppr", 1)])
        store.add_records("q1", {"ppr": {"emd": 0.5, "curve": [0.25, 0.125]}})
    with sqlite3.connect(path) as db:
        db.execute("UPDATE results SET valid_mass_mean = valid_mass_mean + 1e-9 WHERE question_id = 'q2'")
        db.execute("""UPDATE records SET value = '[0.25, 0.126]' WHERE quantity = 'curve'""")
    with RunStore.open(path, read_only=True) as store:
        with pytest.raises(StoreError, match=r"question 'q2', method ppr does not match its checksum \(row changed"):
            store.rows()
        with pytest.raises(StoreError, match=r"records of question 'q1', method ppr does not match its checksum"):
            store.records("q1", "ppr")


def test_a_version_2_store_reads_unchecked_then_gains_checksums(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    with RunStore.open(path) as store:
        store.ensure_config({"model": "m", "sha256": "abc"})
        store.add([make_row("q1", "ppr", 0), make_row("q2", "ppr", 1)])
        store.add_records("q1", {"ppr": {"emd": 0.5}})
    with sqlite3.connect(path) as db:  # as beliefdrift wrote it before the checksums
        db.execute("DROP TABLE checksums")
        db.execute("PRAGMA user_version = 2")
    with RunStore.open(path, read_only=True) as store:  # report: read as before, unchecked
        assert [r.question_id for r in store.rows()] == ["q1", "q2"] and store.records("q1", "ppr") == {"emd": 0.5}
    with RunStore.open(path) as store:  # resumed: the same identity, checksums from the stored rows
        store.ensure_config({"model": "m", "sha256": "abc"})
        assert_rows_equal(store.rows()[1], make_row("q2", "ppr", 1))
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 4
        assert db.execute("SELECT kind, count(*) FROM checksums GROUP BY kind ORDER BY kind").fetchall() == [
            ("config", 1), ("records", 1), ("results", 2)]
        db.execute("UPDATE results SET thetas = ? WHERE question_id = 'q1'", (to_blob(make_row("q", "ppr", 0,
                                                                                              seed=5).thetas),))
    with RunStore.open(path, read_only=True) as store, pytest.raises(StoreError, match="'q1', method ppr does not "
                                                                                        r"match its checksum \(thetas"):
        store.rows()


def stored_run(path: Path) -> None:
    with RunStore.open(path) as store:
        store.ensure_config({"model": "m", "questions": 2, "methods": ["ppr-seed5"]})
        store.add([make_row("q1", "ppr-seed5", 0), make_row("q2", "ppr-seed5", 1)])
        store.add_records("q1", {"ppr-seed5": {"emd": 0.5}})


@pytest.mark.parametrize("change", [
    "UPDATE results SET method = 'ppr-seed4' WHERE question_id = 'q2'",  # one bit: a phantom "PPR + SEED_4" row
    "UPDATE results SET question_id = 'q3' WHERE question_id = 'q2'",
    "UPDATE records SET method = 'ppr-seed4'",
    "DELETE FROM checksums WHERE kind = 'results' AND question_id = 'q2'",  # a removed checksum: damage, not absence
    "DELETE FROM checksums WHERE kind = 'records'",
])
def test_a_changed_key_or_a_removed_checksum_is_damage(tmp_path: Path, change: str) -> None:
    path = tmp_path / "run.sqlite"
    stored_run(path)
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(change)
    for read_only in (True, False):  # report, and a resume
        with RunStore.open(path, create=False, read_only=read_only) as store:
            table = "records" if "records" in change else "result"
            with pytest.raises(StoreError, match=f"the stored {table} of question 'q[123]', method ppr-seed[45] has no "
                                                 "checksum .*the file is damaged"):
                store.rows() if table == "result" else store.records(*store.record_units()[0])
            with pytest.raises(StoreError, match="has no checksum"):
                store.done() if table == "result" else store.record_units()


def test_a_key_changed_with_its_checksum_row_still_fails_the_checksum(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    stored_run(path)
    with closing(sqlite3.connect(path)) as db, db:
        for table in ("results", "alternatives", "checksums"):
            db.execute(f"UPDATE {table} SET method = 'ppr-seed4' WHERE question_id = 'q2'")
    with RunStore.open(path, read_only=True) as store, pytest.raises(
            StoreError, match=r"question 'q2', method ppr-seed4 does not match its checksum \(key changed"):
        store.rows()


@pytest.mark.parametrize("change", ["UPDATE config SET value = '3' WHERE key = 'questions'",
                                    "DELETE FROM config WHERE key = 'methods'",
                                    "DELETE FROM checksums WHERE kind = 'config'",
                                    "DELETE FROM config"])
def test_the_config_is_checksummed(tmp_path: Path, change: str) -> None:
    """A changed setting would make report call a finished run partial, or a resume accept other settings."""
    path = tmp_path / "run.sqlite"
    stored_run(path)
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(change)
    with RunStore.open(path, read_only=True) as store, pytest.raises(StoreError, match="run identity"):
        store.config()
    with RunStore.open(path) as store, pytest.raises(StoreError, match="run identity"):
        store.ensure_config({"model": "m", "questions": 3, "methods": ["ppr-seed5"]})


def as_version_3(path: Path) -> None:
    """The store as beliefdrift wrote it with schema version 3: checksums without the keys, none for the config."""
    with RunStore.open(path, read_only=True) as store:
        rows, records = store.rows(), {unit: store.records(*unit) for unit in store.record_units()}
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("DELETE FROM checksums")
        for row in rows:
            blobs = {name: to_blob(getattr(row, name)) for name in BLOB_COLUMNS}
            pairs = [(name, to_blob(probs)) for name, probs in row.alternatives.items()]
            scalars = (row.position, row.target, row.num_labels, row.valid_mass_mean, row.seconds)
            db.execute(CHECKSUM_INSERT, ("results", row.question_id, row.method,
                                         *checksum_row(result_parts(scalars, blobs, pairs))))
        for (qid, method), values in records.items():
            texts = [(name, json.dumps(value)) for name, value in values.items()]
            db.execute(CHECKSUM_INSERT, ("records", qid, method, *checksum_row(records_parts(texts))))
        db.execute("PRAGMA user_version = 3")


def test_a_version_3_store_is_checked_as_written_then_migrated(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    stored_run(path)
    as_version_3(path)
    with RunStore.open(path, read_only=True) as store:  # report: checked as written
        assert [r.method for r in store.rows()] == ["ppr-seed5"] * 2 and store.records("q1", "ppr-seed5")
        assert store.config()["questions"] == 2
    damaged = tmp_path / "damaged" / "run.sqlite"
    damaged.parent.mkdir()
    damaged.write_bytes(path.read_bytes())
    with closing(sqlite3.connect(damaged)) as db, db:
        db.execute("UPDATE results SET seconds = 2.5 WHERE question_id = 'q2'")
    with pytest.raises(StoreError, match=r"question 'q2', method ppr-seed5 does not match its checksum \(row"):
        RunStore.open(damaged)  # never migrated to a checksum of the damaged row
    with RunStore.open(path) as store:  # resumed: verified, then the keys and the config covered
        store.ensure_config({"model": "m", "questions": 2, "methods": ["ppr-seed5"]})
    with closing(sqlite3.connect(path)) as db, db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 4
        assert db.execute("SELECT kind, count(*) FROM checksums GROUP BY kind ORDER BY kind").fetchall() == [
            ("config", 1), ("records", 1), ("results", 2)]
        db.execute("UPDATE results SET method = 'ppr-seed4' WHERE question_id = 'q2'")
        db.execute("UPDATE checksums SET method = 'ppr-seed4' WHERE question_id = 'q2'")
    with RunStore.open(path, read_only=True) as store, pytest.raises(StoreError, match="key changed"):
        store.rows()


def test_config_is_pinned(tmp_path: Path) -> None:
    config = {"model": "m", "paths": 3, "steps": 4, "methods": ("ppr", "direct"), "split": None}
    with RunStore.open(tmp_path / "run.sqlite") as store:
        store.ensure_config(config)
        store.ensure_config(dict(config))  # same settings: fine
    with RunStore.open(tmp_path / "run.sqlite") as store:
        assert store.config() == {**config, "methods": ["ppr", "direct"]}
        with pytest.raises(StoreError) as err:
            store.ensure_config({**config, "steps": 5, "model": "other"})
    message = str(err.value)
    assert "steps: stored 4, requested 5" in message and "model: stored 'm', requested 'other'" in message
    assert "paths" not in message


def test_records_round_trip_atomically_and_version_1_stores_gain_the_table(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    with RunStore.open(path) as store:
        store.add_records("q1", {"ppr": {"emd": 0.5, "curve": [1.0, 0.25], "ok": True}, "ppr-seed5": {"emd": 0.1}})
        assert store.add_records("q2", {"ppr": {"emd": 0.3}, "ppr-seed5": {"emd": 0.2}}) == 2
        assert store.add_records("q1", {"direct": {"x": 1}, "ppr": {"emd": 0.9}}) == 1  # ppr: stored first
        assert store.record_units() == [("q1", "ppr"), ("q1", "ppr-seed5"), ("q2", "ppr"), ("q2", "ppr-seed5"),
                                        ("q1", "direct")]
        assert store.units() == 5
        assert store.records("q1", "ppr") == {"emd": 0.5, "curve": [1.0, 0.25], "ok": True}
        assert store.records("q1", "direct") == {"x": 1} and store.records("q1", "absent") == {}
    with sqlite3.connect(path) as db:  # an evaluate store written before the records table existed
        db.execute("DROP TABLE records")
        db.execute("DROP TABLE checksums")
        db.execute("PRAGMA user_version = 1")
    with RunStore.open(path) as store:
        assert store.record_units() == [] and store.count() == 0
        store.add_records("q1", {"ppr": {"emd": 0.5}})


#: Writes records into the store argv[1] until a write fails, under a file size limit (EFBIG: what a full disk
#: gives the store, as ENOSPC), and prints the error.
FILL_THE_DISK = """import resource, signal, sys
from beliefdrift.runs.store import RunStore, StoreError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
store = RunStore.open(sys.argv[1])
store.add_records("q0", {"ppr": {"curve": [0.5] * 1000}})
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.RLIM_INFINITY))
try:
    for i in range(1, 1000):
        store.add_records(f"q{i}", {"ppr": {"curve": [i / 7] * 1000}})
except StoreError as err:
    print(err)
"""


def test_a_full_disk_while_writing_says_so_and_the_run_resumes(tmp_path: Path) -> None:
    """Not "not a readable run store … move it away": nothing stored is lost, and freeing space resumes it."""
    path = tmp_path / "run.sqlite"
    result = subprocess.run([sys.executable, "-c", FILL_THE_DISK, str(path)], capture_output=True, text=True,
                            timeout=HANG_S)
    assert "cannot write the run store (disk I/O error: is the disk full?); free some space and run the same " \
           "command again to resume" in result.stdout, result.stdout + result.stderr[-2000:]
    with RunStore.open(path) as store:
        units = store.record_units()
        assert 1 < len(units) < 1000 and store.records(*units[-1])["curve"][0] == (len(units) - 1) / 7
        store.add_records("q999", {"ppr": {"curve": [1.0]}})


def sidecars(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir() if path.name != "run.sqlite")


def journal_mode(path: Path) -> str:
    """As the file's header says (bytes 18 and 19: 1 for a rollback journal, 2 for WAL), without opening it."""
    return {b"\x01\x01": "delete", b"\x02\x02": "wal"}[path.read_bytes()[18:20]]


def test_a_closed_store_is_one_file_and_readers_leave_nothing(tmp_path: Path) -> None:
    """WAL while writers have it open (several processes write at once); the last one to close checkpoints it into
    one file, and a read-only open (report, export) creates no -wal or -shm beside it, also of a store that was
    left in WAL mode (written before, or by two writers that closed at once)."""
    path = tmp_path / "run.sqlite"
    with RunStore.open(path) as writer, RunStore.open(path, create=False) as other:
        writer.add([make_row("q1", "ppr", 0)])
        other.add([make_row("q2", "ppr", 1)])
        assert journal_mode(path) == "wal" and sidecars(tmp_path) == ["run.sqlite-shm", "run.sqlite-wal"]
        with RunStore.open(path, read_only=True) as reader:  # a report while the run is going on
            assert reader.count() == 2
    assert sidecars(tmp_path) == [] and journal_mode(path) == "delete"
    with RunStore.open(path, read_only=True) as reader:
        assert reader.count() == 2
    assert sidecars(tmp_path) == []
    with closing(sqlite3.connect(path, isolation_level=None)) as db:  # as stores were left before
        db.execute("PRAGMA journal_mode = WAL")
    with RunStore.open(path, read_only=True) as reader:
        assert reader.count() == 2
    assert sidecars(tmp_path) == []


@pytest.mark.parametrize("content", [b"garbage " * 200, b"SQLite format 3\x00" + b"\xff" * 200])
def test_corrupt_file_is_a_clear_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "run.sqlite"
    path.write_bytes(content)
    with pytest.raises(StoreError, match="not a readable beliefdrift run store"):
        RunStore.open(path)


def test_foreign_sqlite_file_and_missing_store(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (x)")
    with pytest.raises(StoreError, match="not a beliefdrift run store"):
        RunStore.open(path)
    with pytest.raises(StoreError, match="no run store"):
        RunStore.open(tmp_path / "missing" / "run.sqlite", create=False)
    assert not (tmp_path / "missing").exists()


#: How long a test waits for its writer processes: far longer than they take on any machine, however loaded (the
#: tests assert what the writers store, not how fast), only so that a hung writer cannot stall the suite forever.
HANG_S = 1800


def test_concurrent_writers_from_several_processes(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    RunStore.open(path).close()
    workers, questions = 3, 30
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=write_share, args=(str(path), w, workers, questions)) for w in range(workers)]
    for process in processes:
        process.start()
    try:
        for process in processes:  # however long a loaded machine takes: the cap only ends a hang
            process.join(HANG_S)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
    assert [process.exitcode for process in processes] == [0] * workers
    with RunStore.open(path, create=False) as store:
        rows = store.rows()
    assert len(rows) == 2 * questions
    assert [r.position for r in rows] == sorted(2 * list(range(questions)))
    assert_rows_equal(rows[-1], make_row("q29", "ppr", 29, seed=29))
