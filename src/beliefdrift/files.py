"""Output files: written atomically (readers see the old file or the complete new one, never a partial one; the
temporaries a killed writer leaves are removed by the next write of the same file), named safely after text from data
or config files (`safe_name`), never over an input or a run store (`check_inputs_outside`, `check_not_a_store`), and
a lock for commands whose output directory one process at a time may write."""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from beliefdrift.errors import UserError

#: The run store's file name in a run directory (`runs.store`); with its SQLite sidecars (`STORE_SIDECARS`).
STORE_FILE = "run.sqlite"
STORE_SIDECARS = ("-wal", "-shm", "-journal")
SQLITE_MAGIC = b"SQLite format 3\x00"


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def process_alive(pid: int) -> bool:
    """Whether a process `pid` exists on this machine (one of another user's counts); where this cannot be asked
    without a signal (not POSIX), every process counts as alive."""
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # none, or a number no process can have
        return False
    except PermissionError:
        return True
    return True


def _temporary_name(path: Path) -> Path:
    """`.<name>.<pid>.<random>.tmp` beside `path`: the writing process is in its name, so another can tell an
    abandoned one."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def remove_abandoned(path: Path) -> None:
    """Remove the temporaries of `path` (`_temporary_name`) whose writing process has ended (a killed writer's)."""
    prefix = f".{path.name}."
    for temporary in path.parent.glob(f"{glob.escape(prefix)}*.tmp"):
        pid = temporary.name[len(prefix) : -len(".tmp")].split(".")[0]
        if pid.isdigit() and not process_alive(int(pid)):
            temporary.unlink(missing_ok=True)


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` to write the new file to; renamed onto `path` (`os.replace`, atomic) when the
    block ends without an error, removed when it raises. The file gets the permissions a plain `open` would give
    it (0666 less the umask); temporaries of `path` abandoned by a killed writer are removed first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(path)
    temporary = _temporary_name(path)
    try:
        yield temporary
        if temporary.exists():
            os.chmod(temporary, 0o666 & ~current_umask())
        os.replace(temporary, path)
    except OSError as err:  # a full disk, a file too large: named by the output, not by its temporary
        temporary.unlink(missing_ok=True)
        if err.filename is None or err.filename == str(temporary):
            raise OSError(err.errno, err.strerror, str(path)) from err
        raise
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, text: str) -> None:
    """Write `text` (UTF-8, whatever the locale) to `path` through `replacing`: readers see the old file or the
    complete new one."""
    with replacing(path) as temporary:
        temporary.write_bytes(text.encode("utf-8"))


#: What an output path of each kind must be (`check_output`).
OUTPUTS = {"directory": "a directory (an existing one, or one to create)",
           "file": "a regular file or a new one (in an existing directory, or in one to create)"}
#: What a path that is not a regular file is, by its `os.lstat` mode (`stat.S_IFMT`).
SPECIAL_FILES = {stat.S_IFLNK: "a symbolic link", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
                 stat.S_IFIFO: "a named pipe (FIFO)", stat.S_IFSOCK: "a socket"}


def check_output(path: Path, flag: str, kind: str) -> None:
    """`path` can be written as an output `kind` (one of `OUTPUTS`): a directory is one or can be created, a file is
    none and its directory is one or can be created (no file or dangling symbolic link stands in the way); else a
    UserError naming `flag`."""
    if not str(path).strip():
        raise UserError(f"{flag}: empty; expected {OUTPUTS[kind]}")
    if kind == "file" and path.is_dir():
        raise UserError(f"{flag} {path}: is a directory; expected {OUTPUTS[kind]}")
    if kind == "file" and os.path.lexists(path) and not stat.S_ISREG(mode := os.lstat(path).st_mode):
        # written by renaming a new file onto it, a link or a device would be replaced, and a pipe never opened
        raise UserError(f"{flag} {path}: is {SPECIAL_FILES.get(stat.S_IFMT(mode), 'not a regular file')}; expected "
                        f"{OUTPUTS[kind]}")
    for part in (path, *path.parents) if kind == "directory" else path.parents:
        if part.is_symlink() and not part.exists():
            where = "is" if part == path else f"lies inside {part}, which is"
            raise UserError(f"{flag} {path}: {where} a symbolic link to {os.readlink(part)}, which does not exist; "
                            f"expected {OUTPUTS[kind]}")
        if part.exists():
            if not part.is_dir():
                where = "is a file" if part == path else f"lies inside {part}, which is a file"
                raise UserError(f"{flag} {path}: {where}; expected {OUTPUTS[kind]}")
            return


def check_directory(directory: Path, what: str) -> None:
    """A UserError naming `what` (e.g. RUN_DIR) where `directory` is not an existing directory."""
    if not Path(directory).is_dir():
        problem = "is a file, not a directory" if Path(directory).exists() else "no such directory"
        raise UserError(f"{what} {directory}: {problem}")


def is_run_directory(directory: Path) -> bool:
    """Whether `directory` holds a run store (the output of evaluate, drift, emd or reasoning)."""
    return (directory / STORE_FILE).is_file()


def is_database(path: Path) -> bool:
    """Whether `path` is a run store or one of its sidecars by name, or an SQLite database by content (read only
    from a regular file: a pipe or a device is never opened)."""
    if path.name in {STORE_FILE, *(STORE_FILE + suffix for suffix in STORE_SIDECARS)}:
        return True
    if not path.is_file():
        return False
    try:
        with open(path, "rb") as handle:
            return handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def check_not_a_store(path: Path, flag: str, own_run: Path | None = None) -> None:
    """The output file `path` replaces no run store (nor any SQLite database) and lies in no run directory but
    `own_run`'s (another run's files are its outputs): else a UserError naming `flag`."""
    if is_database(path):
        raise UserError(f"{flag} {path}: is a run store (or another SQLite database); an output never replaces one, "
                        "choose another file")
    directory = path.parent
    if is_run_directory(directory) and (own_run is None or not same_path(directory, own_run)):
        raise UserError(f"{flag} {path}: lies in the run directory {directory}, whose files are that run's; choose "
                        "a file outside it")


def same_path(a: Path, b: Path) -> bool:
    """Whether `a` and `b` name the same file or directory (through links and `..`)."""
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def check_inputs_outside(directory: Path, flag: str, inputs: Mapping[str, str | Path | None],
                         outputs: Sequence[str]) -> None:
    """No input file (`inputs`: {its flag: its path, or a name that is not a file}) is one the command writes into
    its output directory `directory` (`outputs`: glob patterns of paths relative to it): an output never replaces
    an input. Else a UserError naming both flags."""
    root = Path(directory).expanduser().resolve()
    for name, value in inputs.items():
        if value is None or not str(value).strip() or not Path(str(value)).expanduser().is_file():
            continue
        candidate = Path(str(value)).expanduser().resolve()
        if not candidate.is_relative_to(root):
            continue
        relative = candidate.relative_to(root).as_posix()
        if any(fnmatch.fnmatchcase(relative, pattern) for pattern in outputs):
            raise UserError(f"{name} {value}: the command writes {relative} into its output directory ({flag} "
                            f"{directory}), which would replace this input; move it elsewhere or choose another "
                            "output directory")


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


class DirectoryLock:
    """A held lock on a directory (`lock_directory`); `release` (or the process's end, SIGKILL included) frees it,
    and `release` also removes the lock file, so a finished run leaves none naming a process that has ended."""

    def __init__(self, path: Path, handle: BinaryIO):
        self.path = path
        self._handle: BinaryIO | None = handle

    def release(self) -> None:
        if self._handle is not None:
            self.path.unlink(missing_ok=True)  # while still held: a waiting process then locks a new file
            self._handle.close()
            self._handle = None


def lock_directory(directory: Path, command: str) -> DirectoryLock | None:
    """Lock `directory` for this process until the lock is released or the process ends (SIGKILL included), or
    raise a UserError naming the process that holds it. A POSIX record lock (`lockf`) is per process: the same
    process may lock the directory again. Where there is no `fcntl` (Windows) nothing is locked (None)."""
    try:
        import fcntl
    except ImportError:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_FILE
    while True:
        handle = open(path, "a+b")  # noqa: SIM115 (the lock keeps it open while it is held)
        try:
            fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().decode(errors="replace").strip() or "unknown"
            handle.close()
            raise UserError(f"{directory} is in use by another beliefdrift {command} (process {holder}); wait for it "
                            "to end, or choose another --out directory") from None
        try:
            if os.path.samestat(os.fstat(handle.fileno()), os.stat(path)):
                break
        except FileNotFoundError:
            pass
        handle.close()  # the holder released it and removed the file meanwhile: lock the one now there
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n".encode())
    handle.flush()
    return DirectoryLock(path, handle)
