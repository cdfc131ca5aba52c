"""Results of the diagnostic commands (drift, emd, reasoning): named quantities per question × method in the run
store (`<out>/run.sqlite`, table `records`), plus plain-file outputs written atomically.

A question's records are written in one transaction once its work is complete, so an interrupted run resumes by
skipping the question × method pairs already stored; the store's config pins the settings that produced them.
`records.csv` lists every scalar record (question_id, method, quantity, value) for spreadsheets.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from beliefdrift.files import write_atomic
from beliefdrift.store import STORE_FILE, RunStore


class RecordWriter:
    """The records of one diagnostic run in `out` (see the module docstring); a StoreError if `out` holds a run
    with other settings. Close it (or use it as a context manager) when done: until then the newest records may
    sit in `run.sqlite-wal` beside the store, not in `run.sqlite` itself."""

    def __init__(self, out: Path, config: dict[str, Any]):
        self.out = Path(out)
        self.store = RunStore.open(self.out / STORE_FILE)
        try:
            self.store.ensure_config(config)
        except BaseException:
            self.store.close()
            raise

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def done(self, question_id: str, method: str) -> bool:
        return self.store.has_records(question_id, method)

    def write(self, question_id: str, units: Mapping[str, Mapping[str, Any]]) -> None:
        """Store {method: {quantity: value}} of one question (JSON-serialisable values) in one transaction."""
        self.store.add_records(question_id, units)

    def read(self, question_id: str, method: str) -> dict[str, Any]:
        """The quantities of one question × method, as written."""
        return self.store.records(question_id, method)

    def write_scalars(self, keys: list[tuple[str, str]]) -> Path:
        """records.csv: every scalar (number or bool) record of the given (question_id, method) pairs."""
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(["question_id", "method", "quantity", "value"])
        for question_id, method in keys:
            for name, value in self.read(question_id, method).items():
                if isinstance(value, (int, float, bool)):
                    writer.writerow([question_id, method, name, value])
        path = self.out / "records.csv"
        write_atomic(path, buffer.getvalue())
        return path
