"""`beliefdrift <command>`: each command lives in `beliefdrift.cli.<name>`, whose module imports no torch, so
that `--help` answers at once; a command imports the library when it runs.

A user error (a bad flag, config key, file or setting) is one line on stderr and exit status 2, with a traceback
only under `--debug`; Ctrl-C is one line saying how much is stored and exit status 130. Progress and notes go
through `logging` to stderr (`--quiet`: warnings only, `--verbose`: debug messages too); a command's data (tables,
summaries) go to stdout.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import logging
import sys
import traceback
from pathlib import Path

from beliefdrift import __version__, show_progress
from beliefdrift.config.options import CommandParser
from beliefdrift.errors import UserError
from beliefdrift.registry import did_you_mean

DESCRIPTION = ("Measure and repair belief drift in language models answering multiple-choice questions: prompted "
               "predictive resampling (PPR), answer seeding, and SC fine-tuning (AM-PPR).")

COMMANDS = ["demo", "drift", "emd", "evaluate", "report", "export", "reasoning", "train", "paper"]
RESUMABLE = {"demo", "drift", "emd", "evaluate", "reasoning", "train"}
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


def out_of_memory(command: str) -> str:
    lower = MEMORY_SETTINGS.get(command, "-J/--paths (paths run together)")
    return f"out of GPU memory; lower {lower}, or use --dtype bfloat16 / a smaller model"


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
        return args.func(args) or 0
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"\nbeliefdrift {args.command}: {interrupted(args)}", file=sys.stderr)
        return 130
    except (OSError, ValueError, *memory_errors()) as err:  # the user can fix these: say what
        if args.debug:
            traceback.print_exc()
        message = out_of_memory(args.command) if isinstance(err, memory_errors()) else str(err)
        one_line = "; ".join(line.strip() for line in message.splitlines() if line.strip())
        print(f"beliefdrift{f' {args.command}' if args.command else ''}: error: {one_line}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
