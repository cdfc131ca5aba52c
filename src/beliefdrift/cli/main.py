"""`beliefdrift <command>`: each command lives in `beliefdrift.cli.<name>`, whose module imports no torch, so
that `--help` answers at once; a command imports the library when it runs.

A user error (a bad flag, config key, file or setting) is one line on stderr and exit status 2, with a traceback
only under `--debug`; Ctrl-C is one line saying how much is stored and exit status 130. Progress and notes go
through `logging` to stderr (`--quiet`: warnings only, `--verbose`: debug messages too); a command's data (tables,
summaries) go to stdout. No credential is printed: the error line, the `--debug` traceback and every log message
go through `credentials.redact`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import logging
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from beliefdrift.config.options import CommandParser
from beliefdrift.credentials import RedactingFilter, redact
from beliefdrift.errors import UserError
from beliefdrift.progress import show_progress
from beliefdrift.registry import did_you_mean
from beliefdrift.version import __version__

DESCRIPTION = ("Measure and repair belief drift in language models answering multiple-choice questions: prompted "
               "predictive resampling (PPR), answer seeding, and SC fine-tuning (AM-PPR).")

COMMANDS = ["demo", "drift", "emd", "evaluate", "report", "export", "reasoning", "train", "paper"]
RESUMABLE = {"demo", "drift", "emd", "evaluate", "reasoning", "train"}
#: matplotlib's warning for a character its font cannot draw (a question id in a figure's title): not shown under
#: --quiet, which shows the run's own warnings only.
GLYPH_WARNING = r"Glyph \d+ .*missing from"
#: What to lower when a command runs out of GPU memory.
MEMORY_SETTINGS = {
    "evaluate": "--batch-questions or -J/--paths (paths run together)",
    "drift": "--batch-questions or -J/--paths (paths run together)",
    "train": "--micro-batch (paths per forward pass), or --gradient-checkpointing",
    "emd": "--batch-budget (k-step paths per forward pass), --batch-questions or -J/--paths",
    "reasoning": "-J/--paths (rollouts run together) or --max-new-tokens",
}


def build_parser() -> CommandParser:
    """The `beliefdrift` parser with every command's (imports no torch, transformers or peft)."""
    parser = CommandParser(prog="beliefdrift", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    add_output_options(parser, argparse.SUPPRESS)
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"beliefdrift.cli.{name}").add_parser(subparsers)
        add_output_options(subparsers.choices[name], argparse.SUPPRESS)
    parser.set_defaults(debug=False, verbosity=0)
    return parser


def add_output_options(parser: argparse.ArgumentParser, default: object) -> None:
    """--debug, --quiet and --verbose, accepted before the command and after it."""
    group = parser.add_argument_group("output")
    group.add_argument("--debug", action="store_true", default=default, help="show the full traceback of an error")
    loudness = group.add_mutually_exclusive_group()
    loudness.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=-1, default=default,
                          help="print warnings and errors only (no progress messages or bars)")
    loudness.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=1, default=default,
                          help="print debug messages too")


def version() -> str:
    """The installed distribution's version (the package's own when it runs from a source tree)."""
    try:
        return importlib.metadata.version("beliefdrift")
    except importlib.metadata.PackageNotFoundError:
        return __version__


def configure_logging(verbosity: int) -> None:
    """The package's messages to stderr, one line each: warnings only (-1), progress (0) or debug messages too (1);
    the progress bars show unless only warnings do (`beliefdrift.show_progress`)."""
    show_progress(verbosity >= 0)
    logger = logging.getLogger("beliefdrift")
    logger.handlers.clear()  # one handler, however often `main` runs in a process
    handler = StderrHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(RedactingFilter())
    logger.addHandler(handler)
    logger.setLevel({-1: logging.WARNING, 0: logging.INFO, 1: logging.DEBUG}[verbosity])


class StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a message is emitted (tests and notebooks replace it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def memory_errors() -> tuple[type[BaseException], ...]:
    """torch's out-of-memory error once torch is loaded (a command that never loaded it cannot raise it)."""
    torch = sys.modules.get("torch")
    return (torch.OutOfMemoryError,) if torch is not None else ()


def fixable_errors() -> tuple[type[BaseException], ...]:
    """The errors `main` tells the user in one line (exit 2; a RuntimeError only where memory ran out), torch's
    out-of-memory error among them once torch is loaded (`memory_errors`): read when an error is raised."""
    return (OSError, ValueError, MemoryError, RuntimeError, *memory_errors())


def out_of_host_memory(err: BaseException) -> bool:
    """Whether `err` says the machine's memory ran out (numpy's MemoryError, torch's CPU allocator)."""
    return isinstance(err, MemoryError) or (isinstance(err, RuntimeError) and "can't allocate memory" in str(err))


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler ending the job, `kill`): stopped like Ctrl-C, with the same line."""


def terminate(_signum: int, _frame: object) -> None:
    raise Terminated


@contextmanager
def stopped_by_sigterm() -> Iterator[None]:
    """SIGTERM raises `Terminated` inside the block (where no one else handles it: the main thread, default
    handler), so a terminated command says what is stored, as Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def error_message(err: BaseException, command: str | None) -> str:
    """What the user is told of an error they can act on: running out of memory names the settings to lower, a
    model cache that cannot be created names `BELIEFDRIFT_CACHE`, any other error its own message."""
    if isinstance(err, memory_errors()) or out_of_host_memory(err):
        return out_of_memory(command, gpu=isinstance(err, memory_errors()))
    model_files = sys.modules.get("beliefdrift.backend.model_files")
    if isinstance(err, OSError) and isinstance(err.filename, str) and model_files is not None:
        cache = model_files.cache_dir()
        if Path(err.filename) in (cache, *cache.parents) and Path(err.filename) != Path(cache.anchor):
            return (f"cannot create the model cache {cache} ({err.strerror}: {err.filename}; is HOME writable?); set "
                    "BELIEFDRIFT_CACHE to a writable directory")
    return str(err)


def interrupted(args: argparse.Namespace) -> str:
    """One line for Ctrl-C: what the output directory holds and how to resume."""
    if args.command not in RESUMABLE or not hasattr(args, "out"):
        return "interrupted"
    stored = last_checkpoint(Path(args.out)) if args.command == "train" else stored_units(Path(args.out))
    return f"interrupted; {stored}run the same command again to resume"


def stored_units(out: Path) -> str:
    """How many units the run store in `out` holds ("" when it cannot tell)."""
    from beliefdrift.runs.store import STORE_FILE, RunStore, StoreError

    path = out / STORE_FILE
    if path.is_file():
        try:
            with RunStore.open(path, read_only=True) as store:
                return f"{store.units()} question × method results stored in {path}; "
        except StoreError:
            pass
    return ""


def last_checkpoint(out: Path) -> str:
    """The training run's last checkpoint in `out` and its step."""
    from beliefdrift.amortize.trainer import latest_checkpoint

    checkpoint = latest_checkpoint(out / "checkpoints")
    if checkpoint is None:
        return "no checkpoint yet; "
    try:
        state = json.loads((checkpoint / "state.json").read_text())
        return f"the last checkpoint is {checkpoint} (step {state['step']} of {state['total_steps']}); "
    except (OSError, ValueError, KeyError):
        return f"the last checkpoint is {checkpoint}; "


def redact_messages(err: BaseException) -> None:
    """Remove credentials (`credentials.redact`) from the messages of `err` and of the exceptions it was raised from
    or during, which a bug's traceback prints."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        current.args = tuple(redact(arg) if isinstance(arg, str) else arg for arg in current.args)
        current = current.__cause__ or current.__context__


def out_of_memory(command: str | None, gpu: bool = True) -> str:
    lower = MEMORY_SETTINGS.get(command or "", "-J/--paths (paths run together)")
    return f"out of {'GPU ' if gpu else ''}memory; lower {lower}, or use --dtype bfloat16 / a smaller model"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    given = sys.argv[1:] if argv is None else argv
    # until the arguments are parsed, the command is the first word that names one (for error messages)
    args = argparse.Namespace(command=next((word for word in given if word in COMMANDS), None), debug=False)
    if not given:  # a bare `beliefdrift`: what it can do
        print(parser.format_help())
        return 2
    try:
        command = next((word for word in given if not word.startswith("-")), None)
        if command is not None and command not in COMMANDS:
            raise UserError(f"unknown command {command!r}; expected one of {', '.join(COMMANDS)}"
                            f"{did_you_mean(command, COMMANDS)} (see beliefdrift --help)")
        args = parser.parse_args(argv)
        configure_logging(args.verbosity)
        with stopped_by_sigterm(), warnings.catch_warnings():
            if args.verbosity < 0:
                warnings.filterwarnings("ignore", GLYPH_WARNING, UserWarning)
            return args.func(args) or 0
    except KeyboardInterrupt as err:
        if args.debug:
            raise
        print(f"\nbeliefdrift {args.command}: {interrupted(args)}", file=sys.stderr)
        return 128 + signal.SIGTERM if isinstance(err, Terminated) else 130
    except fixable_errors() as err:
        if isinstance(err, RuntimeError) and not out_of_host_memory(err) and not isinstance(err, memory_errors()):
            redact_messages(err)
            raise  # a bug: its traceback
        if args.debug:
            print(redact(traceback.format_exc()), end="", file=sys.stderr)
        message = error_message(err, args.command)
        one_line = "; ".join(line.strip() for line in message.splitlines() if line.strip())
        print(redact(f"beliefdrift{f' {args.command}' if args.command else ''}: error: {one_line}"), file=sys.stderr)
        return 2
    except Exception as err:  # a bug: its traceback, without credentials
        redact_messages(err)
        raise


if __name__ == "__main__":
    sys.exit(main())
