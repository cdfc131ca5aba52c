"""Results of the diagnostic commands as plain files, one record per question × method × quantity.

Layout under the output directory:
    config.json                          the settings that produced the records (a resumed run must match)
    records/<method>/<question>.json     [{"question_id", "method", "quantity", "value"}, …] for one question × method
    records.csv                          every scalar record (question_id, method, quantity, value)

Each question × method file is written atomically (temporary file + rename) once its work is complete, so an
interrupted run resumes by skipping the files that exist. The record shape maps one-to-one onto rows of a store.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` so readers see the old file or the complete new one, never a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _file_name(key: str) -> str:
    """A file-system safe, collision-free name for a question id or method name."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", key)
    return safe if safe == key else f"{safe}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


class RecordWriter:
    """Per question × method record files in `out` for one configuration (see the module docstring)."""

    def __init__(self, out: Path, config: dict[str, Any]):
        self.out = Path(out)
        config = json.loads(json.dumps(config))  # tuples → lists, as they read back
        config_path = self.out / "config.json"
        if config_path.exists():
            previous = json.loads(config_path.read_text())
            if previous != config:
                changed = sorted(k for k in config.keys() | previous.keys() if config.get(k) != previous.get(k))
                raise ValueError(f"{self.out} holds results of different settings ({', '.join(changed)}); "
                                 "use another --out or the same settings to resume")
        else:
            write_atomic(config_path, json.dumps(config, indent=2) + "\n")

    def path(self, question_id: str, method: str) -> Path:
        return self.out / "records" / _file_name(method) / f"{_file_name(question_id)}.json"

    def done(self, question_id: str, method: str) -> bool:
        return self.path(question_id, method).exists()

    def write(self, question_id: str, method: str, quantities: dict[str, Any]) -> None:
        """Store every quantity (JSON-serialisable: numbers, lists, strings, bools) of one question × method."""
        records = [{"question_id": question_id, "method": method, "quantity": name, "value": value}
                   for name, value in quantities.items()]
        write_atomic(self.path(question_id, method), json.dumps(records) + "\n")

    def read(self, question_id: str, method: str) -> dict[str, Any]:
        """The quantities of one question × method, as written."""
        records = json.loads(self.path(question_id, method).read_text())
        return {record["quantity"]: record["value"] for record in records}

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
