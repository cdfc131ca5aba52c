"""Results of the diagnostic commands (drift, emd, reasoning): named quantities per question × method in the run
store (`<out>/run.sqlite`, table `records`, written unit by unit by `runs.loop.run_loop`), read back for the report,
and `records.csv`: every scalar record (question_id, method, quantity, value) for spreadsheets.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from beliefdrift.files import write_atomic
from beliefdrift.runs.store import STORE_FILE, RunStore


def stored_records(out: Path, question_ids: Sequence[str], names: Sequence[str]) -> dict[tuple[str, str], dict]:
    """{(question id, method): its quantities} of every question × name from `out`'s run store, and `records.csv`
    of their scalars. The store is closed when this returns: its file then holds every record (none left in its
    write-ahead log)."""
    with RunStore.open(Path(out) / STORE_FILE, create=False) as store:
        records = {(question_id, name): store.records(question_id, name)
                   for question_id in question_ids for name in names}
    write_scalars(Path(out) / "records.csv", records)
    return records


def write_scalars(path: Path, records: Mapping[tuple[str, str], Mapping[str, Any]]) -> Path:
    """A CSV of every scalar (number or bool) record of the given {(question_id, method): quantities}."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["question_id", "method", "quantity", "value"])
    for (question_id, method), quantities in records.items():
        for name, value in quantities.items():
            if isinstance(value, (int, float, bool)):
                writer.writerow([question_id, method, name, value])
    write_atomic(path, buffer.getvalue())
    return path
