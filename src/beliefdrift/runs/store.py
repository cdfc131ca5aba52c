"""The run store: one SQLite file per evaluation run (`<out>/run.sqlite`), resumable and multi-process safe.

One row per (question, method) holds the method's estimate, the question's target and the per-path arrays
(answers, seeds, θ_n, valid_mass) as `.npy` blobs; the diagnostic commands (drift, emd, reasoning) store named
JSON quantities per (question, method) in the `records` table instead. A question's rows are written in one
transaction, so a run killed at any moment loses at most the question in flight; re-running skips what is stored. The
`config` table pins the settings that determine the results, and a run directory is never reused with
different ones. While writers have it open the store is in WAL mode, with a busy timeout, so several ranks (or two
runs of one command) write to one file; a (question, method) another process stored first is kept and the duplicate
dropped. The last connection to close switches it back to a rollback journal, so a finished run is one file (no
`-wal`/`-shm`). Readers (`report`) open the file read-only, so archived read-only runs can be reported, and leave
nothing behind.

SQLite checks no page contents, so a flipped bit in a stored number, key or setting would be read back as another
valid value: every results row (with its alternatives), every question × method's records and the config carry
checksums over the whole row, its keys included (table `checksums`, written in the same transaction), and reading
one that does not match, or a row without one, is a StoreError naming the question and method. A store from before
the checksums (schema version 1 or 2) gains them, computed from its rows, the first time it is opened for writing;
opened read-only it is read unchecked. One of version 3 (checksums without the keys, no config checksum) is checked
as written and, opened for writing, its checksums are verified and rewritten with the keys.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import math
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

import numpy as np

from beliefdrift.files import STORE_FILE as STORE_FILE  # its name, here as everywhere

APPLICATION_ID = 0x62646674  # "bdft": marks a SQLite file as a beliefdrift run store
#: 2 added the `records` table, 3 the `checksums` table, 4 put the keys and the config under the checksums (older
#: stores are migrated when opened for writing, read as written when opened read-only)
SCHEMA_VERSION = 4
KEYED_VERSION = 4  # the first version whose checksums cover the keys and the config
BUSY_TIMEOUT_S = 120.0
T = TypeVar("T")

RECORDS_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    question_id TEXT NOT NULL,
    method      TEXT NOT NULL,         -- a method ("ppr-seed5") or a condition of the reasoning command
    quantity    TEXT NOT NULL,         -- e.g. "emd_bar_l1", "marginal_mean"
    value       TEXT NOT NULL,         -- JSON
    PRIMARY KEY (question_id, method, quantity)
);
"""

CHECKSUMS_SCHEMA = """
CREATE TABLE IF NOT EXISTS checksums (
    kind        TEXT NOT NULL,         -- "results" (a results row and its alternatives), "records" or "config"
    question_id TEXT NOT NULL,         -- "" for the config
    method      TEXT NOT NULL,         -- "" for the config
    digest      TEXT NOT NULL,         -- of the parts every reader reads (the keys included): `group_digests`
    paths       TEXT,                  -- of a results row's per-path arrays (NULL for records)
    parts       TEXT NOT NULL,         -- JSON {part: digest}, to name what changed when a digest does not match
    PRIMARY KEY (kind, question_id, method)
);
"""

SCHEMA = """
CREATE TABLE config (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL                -- JSON
);
CREATE TABLE results (
    question_id     TEXT    NOT NULL,
    method          TEXT    NOT NULL,  -- e.g. "ppr-seed5"
    position        INTEGER NOT NULL,  -- index of the question in the run's question list
    target          INTEGER NOT NULL,  -- index of the correct label
    num_labels      INTEGER NOT NULL,
    probs           BLOB    NOT NULL,  -- .npy float64 [K]: the method's estimate
    valid_mass_mean REAL    NOT NULL,  -- mean label mass over paths and steps
    valid_mass      BLOB    NOT NULL,  -- .npy [J, N+1] label mass of each θ_n (direct: [1, 1])
    answers         BLOB,              -- .npy int64 [J, N] generated answers (NULL for direct)
    seeds           BLOB,              -- .npy int64 [J, m] seed answers (NULL for direct)
    thetas          BLOB,              -- .npy float32 [J, N+1, K] θ_0 … θ_N (NULL for direct)
    seconds         REAL    NOT NULL,  -- wall time of the batched run this row came from (a question's
                                       -- methods on one model run together)
    PRIMARY KEY (question_id, method)
);
CREATE TABLE alternatives (
    question_id TEXT NOT NULL,
    method      TEXT NOT NULL,
    estimator   TEXT NOT NULL,         -- e.g. "q_star_rb"
    probs       BLOB NOT NULL,         -- .npy float64 [K]
    PRIMARY KEY (question_id, method, estimator),
    FOREIGN KEY (question_id, method) REFERENCES results (question_id, method)
);
""" + RECORDS_SCHEMA + CHECKSUMS_SCHEMA


#: What a differing identity key means, where its name does not say it.
KEY_HINTS = {"questions_sha256": " (the questions differ: another data file or content, --data-dir, -n or --seed)",
             "cid_test": " (an earlier beliefdrift stored another c.i.d. check; its verdicts would mix with these)",
             "drift_test": " (an earlier beliefdrift stored another drift test's terms; they would mix with these)"}


class StoreError(ValueError):
    """The run store cannot be used: not a run store, corrupt, or created with another configuration."""


@dataclass(frozen=True)
class ResultRow:
    """One method's result on one question, as stored."""

    question_id: str
    method: str
    position: int
    target: int
    num_labels: int
    probs: np.ndarray
    valid_mass: np.ndarray
    answers: np.ndarray | None = None
    seeds: np.ndarray | None = None
    thetas: np.ndarray | None = None
    seconds: float = 0.0
    alternatives: Mapping[str, np.ndarray] = field(default_factory=dict)

    @property
    def valid_mass_mean(self) -> float:
        return float(np.mean(self.valid_mass))

    @property
    def path_valid_mass(self) -> np.ndarray:
        """Mean label mass of each path [J] (direct query: one path)."""
        return self.valid_mass.mean(axis=1)


@overload
def to_blob(array: np.ndarray) -> bytes: ...
@overload
def to_blob(array: None) -> None: ...


def to_blob(array: np.ndarray | None) -> bytes | None:
    """An array as `.npy` bytes (dtype and shape included, bit-exact)."""
    if array is None:
        return None
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


@functools.lru_cache(maxsize=1024)
def npy_header(header: bytes) -> tuple[np.dtype, tuple[int, ...], Literal["C", "F"]]:
    """dtype, shape and memory order of a version-1.0 `.npy` header (`np.load` spends most of a small array's
    time parsing it; a run's arrays share a few headers)."""
    buffer = io.BytesIO(header)
    np.lib.format.read_magic(buffer)
    shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(buffer)
    return dtype, shape, "F" if fortran_order else "C"


@overload
def from_blob(blob: bytes) -> np.ndarray: ...
@overload
def from_blob(blob: None) -> None: ...


def from_blob(blob: bytes | None) -> np.ndarray | None:
    """The array of `to_blob` bytes, as `np.load` reads it (ValueError when corrupt)."""
    if blob is None:
        return None
    if blob[6:8] != b"\x01\x00":  # another .npy version (or not .npy): the general reader
        return np.load(io.BytesIO(blob), allow_pickle=False)
    start = 10 + int.from_bytes(blob[8:10], "little")
    dtype, shape, order = npy_header(blob[:start])
    flat = np.frombuffer(blob, dtype, count=math.prod(shape), offset=start)
    return flat.reshape(shape, order=order).copy(order="K")  # writable, like np.load's


#: The blob columns of `results`; the scalar columns, checksummed together as the part "row".
BLOB_COLUMNS = ("probs", "valid_mass", "answers", "seeds", "thetas")
SCALAR_COLUMNS = ("position", "target", "num_labels", "valid_mass_mean", "seconds")
#: The parts of a results row that only a full read (`rows()` with the trajectories) reads: a digest of their own.
PATH_PARTS = ("answers", "seeds", "thetas")


def digest(data: bytes) -> str:
    """16 hex digits of the sha256 of `data`."""
    return hashlib.sha256(data).hexdigest()[:16]


def framed(values: Iterable[bytes | None]) -> bytes:
    """`values` joined so that no other sequence joins to the same bytes (each after its length; NULL as -1)."""
    return b"".join(b"-1\0" if v is None else b"%d\0" % len(v) + v for v in values)


def key_part(question_id: str, method: str) -> dict[str, bytes]:
    """A unit's keys as the checksummed part "key" (schema version 4 on)."""
    return {"key": framed(text.encode("utf-8", "surrogatepass") for text in (question_id, method))}


def result_parts(scalars: Sequence[Any], blobs: Mapping[str, bytes | None],
                 alternatives: Iterable[tuple[str, bytes]], key: Mapping[str, bytes] | None = None
                 ) -> dict[str, bytes | None]:
    """A results row's checksummed parts, as stored: its `SCALAR_COLUMNS` ("row"), each blob column read
    (`blobs`), its alternatives together ((estimator, blob) pairs) and its `key_part` (None: a version 3 store's)."""
    position, target, num_labels, valid_mass_mean, seconds = scalars
    row = repr((int(position), int(target), int(num_labels), float(valid_mass_mean), float(seconds))).encode()
    pairs = framed(item for name, blob in sorted(alternatives) for item in (name.encode(), blob))
    return {"row": row, **blobs, "alternatives": pairs, **(key or {})}


def records_parts(texts: Iterable[tuple[str, str]], key: Mapping[str, bytes] | None = None
                  ) -> dict[str, bytes | None]:
    """One question × method's records as one part: its (quantity, JSON text) pairs in quantity order; and its
    `key_part` (None: a version 3 store's)."""
    return {"records": framed(item.encode() for pair in sorted(texts) for item in pair), **(key or {})}


def config_parts(texts: Iterable[tuple[str, str]]) -> dict[str, bytes | None]:
    """The config as one part: its (key, JSON text) pairs in key order."""
    return {"config": framed(item.encode("utf-8", "surrogatepass") for pair in sorted(texts) for item in pair)}


def group_digests(parts: Mapping[str, bytes | None]) -> tuple[str, str | None]:
    """(digest of the parts outside `PATH_PARTS`, digest of those in it or None when there are none), each over
    the parts in name order: what a read compares with the stored checksum."""
    names = sorted(parts)
    paths = [name for name in names if name in PATH_PARTS]
    main = digest(framed(parts[name] for name in names if name not in PATH_PARTS))
    return main, digest(framed(parts[name] for name in paths)) if paths else None


def checksum_row(parts: Mapping[str, bytes | None]) -> tuple[str, str | None, str]:
    """(digest, paths, parts) of the `checksums` table for a unit's complete `parts`."""
    return (*group_digests(parts), json.dumps({name: None if v is None else digest(v) for name, v in parts.items()}))


CHECKSUM_INSERT = ("INSERT OR REPLACE INTO checksums (kind, question_id, method, digest, paths, parts) "
                   "VALUES (?, ?, ?, ?, ?, ?)")


def config_differences(stored: Mapping[str, Any], requested: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """{key: (stored, requested)} for every key whose value differs (missing counts as None)."""
    return {
        key: (stored.get(key), requested.get(key))
        for key in sorted(set(stored) | set(requested))
        if stored.get(key) != requested.get(key)
    }


def identity_mismatch(where: str, stored: Mapping[str, Any], requested: Mapping[str, Any]) -> StoreError | None:
    """The error for resuming `where` (a run made with the `stored` identity) with the `requested` one, naming each
    differing setting; None when they agree."""
    diff = config_differences(stored, requested)
    if len(diff) > 1:  # the hash differs with any other key: name those
        diff.pop("sha256", None)
    if not diff:
        return None
    details = "; ".join(f"{key}: stored {old!r}, requested {new!r}{KEY_HINTS.get(key, '')}"
                        for key, (old, new) in diff.items())
    return StoreError(f"{where} holds a run with a different configuration ({details}); re-run with the stored "
                      "settings to resume it, or choose another --out directory")


def store_error(path: Path, err: sqlite3.DatabaseError) -> StoreError:
    """The one-line error for a failed SQLite call on the store at `path`: read-only, locked, a full disk, or
    a damaged file."""
    message = str(err)
    if "readonly" in message:
        return read_only_error(path)
    if "locked" in message:
        return StoreError(f"{path}: the run store stayed locked by another process for {BUSY_TIMEOUT_S:.0f} s "
                          f"({message}); run the same command again once it has finished")
    if "full" in message or "I/O error" in message:  # ENOSPC, a failing disk: nothing stored is lost
        return StoreError(f"{path}: cannot write the run store ({message}: is the disk full?); free some space and "
                          "run the same command again to resume")
    return StoreError(f"{path}: not a readable beliefdrift run store ({message}); move it away or choose another "
                      "--out directory")


def checked(method: Callable[..., T]) -> Callable[..., T]:
    """A `RunStore` method whose SQLite failures (a page damaged after the store was opened, a write lock held too
    long) are one StoreError naming the store; IntegrityError passes (`add` reports it)."""

    @functools.wraps(method)
    def wrapper(self: RunStore, *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.IntegrityError:
            raise
        except sqlite3.DatabaseError as err:
            raise store_error(self.path, err) from err

    return wrapper


def writable(path: Path) -> bool:
    """Whether this process may write to `path` (False on read-only files, directories and mounts)."""
    return os.access(path, os.W_OK)


def read_only_error(path: Path) -> StoreError:
    return StoreError(f"{path}: the run store is read-only (an archived run?); `beliefdrift report {path.parent}` "
                      f"reads it; to add to it make {path.parent} and the file writable, or choose another --out "
                      "directory")


def in_wal_mode(path: Path) -> bool:
    """Whether the SQLite file `path` is in WAL mode (its header's read and write versions are 2)."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(20)
    except OSError:
        return False
    return len(header) == 20 and header[18:20] == b"\x02\x02"


def wal_file(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def leave_wal(path: Path, attempts: int = 4) -> None:
    """Switch the store at `path` to a rollback journal (its WAL checkpointed into it, `-wal` and `-shm` removed)
    once no other connection has it open. The switch fails at once while another one has; that one then switches
    it when it closes. Two closing at the same moment may both fail: whoever finds the WAL gone tries again."""
    for attempt in range(attempts):
        if not in_wal_mode(path):
            return
        try:
            db = sqlite3.connect(path, timeout=0, isolation_level=None)
            try:
                if db.execute("PRAGMA journal_mode = DELETE").fetchone()[0] == "delete":
                    return
            finally:
                db.close()
        except sqlite3.Error:
            pass
        if wal_file(path).exists():
            return  # another connection has the store open: it switches it when it closes
        time.sleep(random.uniform(0.01, 0.05) * (attempt + 1))


class RunStore:
    """A run's SQLite file. Open with `RunStore.open(path)`; use one instance per process."""

    def __init__(self, path: Path, connection: sqlite3.Connection, read_only: bool = False):
        self.path = path
        self._db = connection
        self._read_only = read_only
        self._ours = False  # whether the file is a beliefdrift store (closing never touches another SQLite file)
        self._checked = False  # whether the store has checksums (schema version 3 on)
        self._keyed = False  # whether they cover the keys and the config (version 4 on)

    @classmethod
    def open(cls, path: str | Path, create: bool = True, read_only: bool = False) -> RunStore:
        """Open (and with `create`, initialise) the store at `path`; StoreError if it is not a usable store.
        `read_only` opens an existing store without ever writing to it (nor to its directory, when that is
        read-only)."""
        path = Path(path)
        if (read_only or not create) and not path.is_file():
            raise StoreError(f"no run store at {path} (run `beliefdrift evaluate --out {path.parent}` first)")
        if not read_only:
            if path.exists() and not (writable(path) and writable(path.parent)):
                raise read_only_error(path)
            path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if read_only:
                db = sqlite3.connect(f"{path.resolve().as_uri()}?{cls._read_mode(path)}", uri=True,
                                     timeout=BUSY_TIMEOUT_S, isolation_level=None)
            else:
                db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as err:
            raise StoreError(f"{path}: cannot open the run store ({err})") from err
        store = cls(path, db, read_only)
        try:
            store._initialise(create, read_only)
        except sqlite3.DatabaseError as err:
            store.close()
            raise store_error(path, err) from err
        except BaseException:
            store.close()
            raise
        return store

    @staticmethod
    def _read_mode(path: Path) -> str:
        """How a reader opens the store so that it writes nothing: `mode=ro`, and immutable where nothing could
        write it (a read-only directory) or nothing does (a store in WAL mode without its WAL file: no connection
        has it open), where a read-only connection would otherwise create the WAL files it cannot remove."""
        idle_wal = in_wal_mode(path) and not wal_file(path).exists()
        return "mode=ro&immutable=1" if not writable(path.parent) or idle_wal else "mode=ro"

    def _initialise(self, create: bool, read_only: bool) -> None:
        self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        if read_only:
            version = self._schema_version()
            self._ours = True
            self._checked, self._keyed = version >= 3, version >= KEYED_VERSION  # older stores: read unchecked
            return
        with self._transaction():
            app_id = self._db.execute("PRAGMA application_id").fetchone()[0]
            tables = self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if app_id == 0 and tables == 0 and create:
                for statement in SCHEMA.split(";\n"):
                    if statement.strip():
                        self._db.execute(statement)
                self._db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            version = self._schema_version()
            self._ours = True
            self._checked, self._keyed = version >= 3, version >= KEYED_VERSION
            if version < SCHEMA_VERSION:
                self._db.execute(RECORDS_SCHEMA)  # version 1 lacks it
                self._db.execute(CHECKSUMS_SCHEMA)
                self._rewrite_checksums()
                self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                self._checked = self._keyed = True
        if self._db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            self._db.execute("PRAGMA journal_mode = WAL")  # while writers have it open (`close` switches back)

    def _schema_version(self) -> int:
        """The schema version of a beliefdrift store (StoreError for another SQLite file or version)."""
        if self._db.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
            raise StoreError(f"{self.path} is a SQLite file but not a beliefdrift run store; "
                             "move it away or choose another --out directory")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version not in range(1, SCHEMA_VERSION + 1):  # 1 lacks the records table, 1 and 2 the checksums
            raise StoreError(f"{self.path}: run store schema version {version}, this beliefdrift reads "
                             f"version {SCHEMA_VERSION}")
        return version

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE … COMMIT (rolled back on error): takes the write lock up front, so concurrent
        writers queue on the busy timeout instead of failing halfway."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            if self._db.in_transaction:  # SQLite has already rolled back after some errors (a full disk, I/O)
                self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        """Close the connection; the last one to close a store in a writable directory leaves it one file (its WAL
        checkpointed into it, `leave_wal`)."""
        try:
            if self._ours and not self._read_only:
                self._db.execute("PRAGMA journal_mode = DELETE")  # succeeds when no other connection is open
        except sqlite3.Error:
            pass
        self._db.close()
        if self._ours and writable(self.path.parent) and writable(self.path):
            leave_wal(self.path)

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------------------------------- config

    @checked
    def config(self) -> dict[str, Any]:
        """The stored identity ({} before `ensure_config`), checked against its checksum."""
        texts = self._db.execute("SELECT key, value FROM config").fetchall()
        stored = self._checksums("config").get(("", ""))
        if self._keyed and (texts or stored is not None or self._has_units()):
            if stored is None:
                raise StoreError(f"{self.path}: the stored run identity (table config) has no checksum: the file is "
                                 "damaged; restore the run store from a copy, or choose another --out directory")
            self._verify("run identity (table config)", None, None, stored, config_parts(texts))
        try:
            return {key: json.loads(value) for key, value in texts}
        except ValueError as err:
            raise StoreError(f"{self.path}: the stored run identity is corrupt ({err})") from err

    def _has_units(self) -> bool:
        return any(self._db.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() for table in ("results", "records"))

    @checked
    def ensure_config(self, config: Mapping[str, Any]) -> None:
        """Write `config` into an empty store, or check it equals the stored one (StoreError naming the
        differing keys otherwise). Atomic, so concurrent callers agree."""
        requested = json.loads(json.dumps(dict(config)))  # compare as stored (tuples become lists)
        with self._transaction():
            stored = self.config()
            if not stored:
                texts = [(key, json.dumps(value)) for key, value in requested.items()]
                self._db.executemany("INSERT INTO config (key, value) VALUES (?, ?)", texts)
                self._db.execute(CHECKSUM_INSERT, ("config", "", "", *checksum_row(config_parts(texts))))
                return
        mismatch = identity_mismatch(str(self.path), stored, requested)
        if mismatch:
            raise mismatch

    # ---------------------------------------------------------------------------------------- results

    @checked
    def add(self, rows: Iterable[ResultRow]) -> int:
        """Insert rows (one question's methods) in one transaction and return how many were new: a (question,
        method) already stored (by another process running the same command) keeps its first result."""
        rows = list(rows)
        try:
            with self._transaction():
                stored = self.done()
                rows = [r for r in rows if (r.question_id, r.method) not in stored]
                blobs = [{name: to_blob(getattr(r, name)) for name in BLOB_COLUMNS} for r in rows]
                alternatives = [[(name, to_blob(probs)) for name, probs in sorted(r.alternatives.items())]
                                for r in rows]
                self._db.executemany(
                    "INSERT INTO results (question_id, method, position, target, num_labels, probs, "
                    "valid_mass_mean, valid_mass, answers, seeds, thetas, seconds) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(r.question_id, r.method, r.position, r.target, r.num_labels, b["probs"], r.valid_mass_mean,
                      b["valid_mass"], b["answers"], b["seeds"], b["thetas"], r.seconds)
                     for r, b in zip(rows, blobs, strict=True)],
                )
                self._db.executemany(
                    "INSERT INTO alternatives (question_id, method, estimator, probs) VALUES (?, ?, ?, ?)",
                    [(r.question_id, r.method, name, blob)
                     for r, pairs in zip(rows, alternatives, strict=True) for name, blob in pairs],
                )
                self._db.executemany(CHECKSUM_INSERT, [
                    ("results", r.question_id, r.method, *checksum_row(result_parts(
                        (r.position, r.target, r.num_labels, r.valid_mass_mean, r.seconds), b, pairs,
                        key_part(r.question_id, r.method))))
                    for r, b, pairs in zip(rows, blobs, alternatives, strict=True)])
        except sqlite3.IntegrityError as err:
            keys = ", ".join(f"{r.question_id}/{r.method}" for r in rows)
            raise StoreError(f"{self.path}: a result given twice ({keys}): {err}") from err
        return len(rows)

    @checked
    def done(self) -> set[tuple[str, str]]:
        """The stored (question_id, method) pairs (each with its checksum: a key without one is damage)."""
        units = set(self._db.execute("SELECT question_id, method FROM results"))
        self._require_checksums("result", units)
        return units

    def _require_checksums(self, what: str, units: Iterable[tuple[str, str]]) -> None:
        """A StoreError naming the first of `units` (of kind `what`) that has no checksum, in a store with them."""
        if not self._checked:
            return
        kind = "results" if what == "result" else "records"
        have = {(qid, m) for qid, m in self._db.execute("SELECT question_id, method FROM checksums WHERE kind = ?",
                                                        (kind,))}
        missing = sorted(set(units) - have)
        if missing:
            qid, method = missing[0]
            raise StoreError(f"{self.path}: the stored {what} of question {qid!r}, method {method} has no checksum "
                             f"({len(missing)} such unit(s): a changed key or a removed checksum; the file is "
                             "damaged); restore the run store from a copy, or choose another --out directory")

    @checked
    def count(self) -> int:
        return self._db.execute("SELECT count(*) FROM results").fetchone()[0]

    def units(self) -> int:
        """Stored (question, method) units: results plus diagnostic records."""
        return self.count() + len(self.record_units())

    @checked
    def rows(self, trajectories: bool = True) -> list[ResultRow]:
        """Every stored row with its alternatives, ordered by question position, then method name. Without
        `trajectories` the paths' answers, seeds and θ_n are not read (None): what scoring reads, faster."""
        alternatives = self._alternatives()
        checksums = self._checksums("results")
        columns = BLOB_COLUMNS if trajectories else BLOB_COLUMNS[:2]
        query = (f"SELECT question_id, method, {', '.join(SCALAR_COLUMNS)}, {', '.join(columns)} FROM results "
                 "ORDER BY position, method")
        rows = []
        for qid, method, *values in self._db.execute(query):
            scalars, blobs = values[: len(SCALAR_COLUMNS)], dict(zip(columns, values[len(SCALAR_COLUMNS) :],
                                                                     strict=True))
            pairs = alternatives.get((qid, method), [])
            if self._checked:
                if (qid, method) not in checksums:
                    self._require_checksums("result", [(qid, method)])
                self._verify("result", qid, method, checksums[(qid, method)],
                             result_parts(scalars, blobs, pairs, self._key(qid, method)))
            try:
                arrays = {name: from_blob(blob) for name, blob in blobs.items()}
                extra = {name: from_blob(blob) for name, blob in pairs}
            except ValueError as err:
                raise StoreError(f"{self.path}: the stored result of question {qid!r}, method {method} is corrupt "
                                 f"({err})") from err
            position, target, num_labels, _, seconds = scalars
            rows.append(ResultRow(qid, method, position, target, num_labels, **arrays, seconds=seconds,
                                  alternatives=extra))
        return rows

    def _alternatives(self) -> dict[tuple[str, str], list[tuple[str, bytes]]]:
        """{(question_id, method): [(estimator, blob), …]} of every stored alternative estimate."""
        alternatives: dict[tuple[str, str], list[tuple[str, bytes]]] = {}
        for qid, method, name, blob in self._db.execute(
            "SELECT question_id, method, estimator, probs FROM alternatives ORDER BY estimator"
        ):
            alternatives.setdefault((qid, method), []).append((name, blob))
        return alternatives

    def _key(self, question_id: str, method: str) -> dict[str, bytes] | None:
        """The unit's `key_part` where the store's checksums cover the keys."""
        return key_part(question_id, method) if self._keyed else None

    def _checksums(self, kind: str, question_id: str | None = None, method: str | None = None
                   ) -> dict[tuple[str, str], tuple[str, str | None, str]]:
        """{(question_id, method): (digest, paths, parts)} of `kind` (of one unit when given); {} in a store from
        before the checksums, opened read-only."""
        if not self._checked:
            return {}
        query = "SELECT question_id, method, digest, paths, parts FROM checksums WHERE kind = ?"
        args: list[str | None] = [kind]
        if question_id is not None:
            query, args = query + " AND question_id = ? AND method = ?", [kind, question_id, method]
        return {(qid, m): tuple(stored) for qid, m, *stored in self._db.execute(query, args)}

    def _verify(self, what: str, question_id: str | None, method: str | None, stored: tuple[str, str | None, str],
                parts: Mapping[str, bytes | None]) -> None:
        """Nothing when the `parts` read have their `stored` checksum, else a StoreError naming the question ×
        method (None: the config) and the parts that changed (the paths' digest is compared only when their parts
        were read)."""
        main, paths = group_digests(parts)
        if main == stored[0] and (paths is None or paths == stored[1]):
            return
        written = json.loads(stored[2])
        changed = [name for name, value in parts.items() if written.get(name) != (None if value is None else
                                                                                 digest(value))]
        unit = f" of question {question_id!r}, method {method}" if question_id is not None else ""
        raise StoreError(f"{self.path}: the stored {what}{unit} does not match its checksum "
                         f"({', '.join(changed) or 'its checksum'} changed since it was written: the file is "
                         "damaged); restore the run store from a copy, or choose another --out directory")

    # ---------------------------------------------------------------------------------------- records

    @checked
    def add_records(self, question_id: str, units: Mapping[str, Mapping[str, Any]]) -> int:
        """Store {method: {quantity: JSON-serialisable value}} of one question in one transaction and return how
        many methods were new: a (question, method) already stored (by another process) keeps its records."""
        with self._transaction():
            new = [method for method in units if not self.has_records(question_id, method)]
            texts = {method: [(name, json.dumps(value)) for name, value in units[method].items()] for method in new}
            self._db.executemany("INSERT INTO records (question_id, method, quantity, value) VALUES (?, ?, ?, ?)",
                                 [(question_id, method, name, text) for method in new for name, text in texts[method]])
            self._db.executemany(CHECKSUM_INSERT, [
                ("records", question_id, method,
                 *checksum_row(records_parts(texts[method], key_part(question_id, method)))) for method in new])
        return len(new)

    @checked
    def has_records(self, question_id: str, method: str) -> bool:
        query = "SELECT 1 FROM records WHERE question_id = ? AND method = ? LIMIT 1"
        return self._db.execute(query, (question_id, method)).fetchone() is not None

    @checked
    def record_units(self) -> list[tuple[str, str]]:
        """The (question_id, method) pairs with records, in the order they were written (each with its checksum: a
        key without one is damage)."""
        query = "SELECT question_id, method FROM records GROUP BY question_id, method ORDER BY min(rowid)"
        units = [tuple(row) for row in self._db.execute(query)]
        self._require_checksums("records", units)
        return units

    @checked
    def records(self, question_id: str, method: str) -> dict[str, Any]:
        """{quantity: value} of one question × method, in the order written ({} when none are stored)."""
        query = "SELECT quantity, value FROM records WHERE question_id = ? AND method = ? ORDER BY rowid"
        texts = self._db.execute(query, (question_id, method)).fetchall()
        checksums = self._checksums("records", question_id, method)
        if texts and self._checked:
            if (question_id, method) not in checksums:
                self._require_checksums("records", [(question_id, method)])
            self._verify("records", question_id, method, checksums[(question_id, method)],
                         records_parts(texts, self._key(question_id, method)))
        try:
            return {name: json.loads(text) for name, text in texts}
        except ValueError as err:
            raise StoreError(f"{self.path}: the stored records of question {question_id!r}, method {method} are "
                             f"corrupt ({err})") from err

    def _rewrite_checksums(self) -> None:
        """Migrate an older store's checksums (inside the opening transaction): a version 3 store's are verified as
        written (a unit without one is damage), then every unit's and the config's are written with the keys."""
        verify = self._checked  # version 3: checksums without the keys
        old = {kind: self._checksums(kind) for kind in ("results", "records")} if verify else {}
        checksums = []
        alternatives = self._alternatives()
        query = f"SELECT question_id, method, {', '.join(SCALAR_COLUMNS)}, {', '.join(BLOB_COLUMNS)} FROM results"
        for qid, method, *values in self._db.execute(query).fetchall():
            blobs = dict(zip(BLOB_COLUMNS, values[len(SCALAR_COLUMNS) :], strict=True))
            scalars, pairs = values[: len(SCALAR_COLUMNS)], alternatives.get((qid, method), [])
            if verify:
                if (qid, method) not in old["results"]:
                    self._require_checksums("result", [(qid, method)])
                self._verify("result", qid, method, old["results"][qid, method], result_parts(scalars, blobs, pairs))
            parts = result_parts(scalars, blobs, pairs, key_part(qid, method))
            checksums.append(("results", qid, method, *checksum_row(parts)))
        records: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for qid, method, name, text in self._db.execute("SELECT question_id, method, quantity, value FROM records "
                                                        "ORDER BY rowid"):
            records.setdefault((qid, method), []).append((name, text))
        for (qid, method), texts in records.items():
            if verify:
                if (qid, method) not in old["records"]:
                    self._require_checksums("records", [(qid, method)])
                self._verify("records", qid, method, old["records"][qid, method], records_parts(texts))
            checksums.append(("records", qid, method, *checksum_row(records_parts(texts, key_part(qid, method)))))
        texts = self._db.execute("SELECT key, value FROM config").fetchall()
        if texts:
            checksums.append(("config", "", "", *checksum_row(config_parts(texts))))
        self._db.executemany(CHECKSUM_INSERT, checksums)
