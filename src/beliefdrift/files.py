"""Output files: written atomically (readers see the old file or the complete new one, never a partial one), named
safely after text from data or config files (`safe_name`), and a lock for commands whose output directory one
process at a time may write."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import TextIO

from beliefdrift.errors import UserError


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it onto `path` (`os.replace` is atomic); the file
    gets the permissions a plain `open` would give it (0666 less the umask)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp creates 0600; `open` would honour the umask
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


#: What an output path of each kind must be (`check_output`).
OUTPUTS = {"directory": "a directory (an existing one, or one to create)",
           "file": "a file (in an existing directory, or in one to create)"}


def check_output(path: Path, flag: str, kind: str) -> None:
    """`path` can be written as an output `kind` (one of `OUTPUTS`): a directory is one or can be created, a file is
    none and its directory is one or can be created (no file stands in the way); else a UserError naming `flag`."""
    if kind == "file" and path.is_dir():
        raise UserError(f"{flag} {path}: is a directory; expected {OUTPUTS[kind]}")
    for part in (path, *path.parents) if kind == "directory" else path.parents:
        if part.exists():
            if not part.is_dir():
                where = "is a file" if part == path else f"lies inside {part}, which is a file"
                raise UserError(f"{flag} {path}: {where}; expected {OUTPUTS[kind]}")
            return


#: A name `safe_name` keeps as it is: short, lowercase ASCII letters, digits, `-` and `_`, not starting with `-`.
PLAIN_NAME = re.compile(r"[a-z0-9_][a-z0-9_-]{0,47}")
#: Characters kept in the readable part of any other name (every other run of characters becomes one `-`).
_UNSAFE = re.compile(r"[^a-z0-9_]+")


def safe_name(text: str) -> str:
    """`text` (a question id, a run's label: anything read from a data, task or config file) as one component of a
    file name that stays in its directory on every file system: a plain name (`PLAIN_NAME`) as it is, any other as a
    lowercase slug of at most 40 characters and 10 hex digits of the sha256 of `text` ("x/../../Esc" →
    "x-esc-1b5e…"), so distinct texts get distinct names, case-insensitive file systems included. Never empty,
    never `.` or `..`, no separator, NUL or dot (so `Path.with_suffix` adds to it), at most 51 characters."""
    if PLAIN_NAME.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    slug = _UNSAFE.sub("-", text.lower())[:40].strip("-")
    return f"{slug}-{digest}" if slug else digest


LOCK_FILE = ".beliefdrift.lock"


def lock_directory(directory: Path, command: str) -> TextIO | None:
    """Lock `directory` for this process until the returned file is closed or the process ends (SIGKILL included),
    or raise a UserError naming the process that holds it. A POSIX record lock (`lockf`) is per process: the same
    process may lock the directory again. Where there is no `fcntl` (Windows) nothing is locked (None)."""
    try:
        import fcntl
    except ImportError:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    handle = open(directory / LOCK_FILE, "a+")  # noqa: SIM115 (the caller keeps it open while it holds the lock)
    try:
        fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise UserError(f"{directory} is in use by another beliefdrift {command} (process {holder}); wait for it to "
                        "end, or choose another --out directory") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle
