"""`beliefdrift <command>`: each command lives in `beliefdrift.commands.<name>`.

A user error (a bad flag, config key, file or setting) is one line on stderr and exit status 2, with a traceback
only under `--debug`; Ctrl-C is one line saying how much is stored and exit status 130.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import traceback
from pathlib import Path

import torch

from beliefdrift.config import CommandParser
from beliefdrift.store import STORE_FILE, RunStore, StoreError

COMMANDS = ["demo", "drift", "emd", "evaluate", "report", "reasoning", "train", "paper"]
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
    parser = CommandParser(prog="beliefdrift", description=__doc__.split("\n")[0])
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    for name in COMMANDS:
        importlib.import_module(f"beliefdrift.commands.{name}").add_parser(subparsers)
        subparsers.choices[name].add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                                              help="show the full traceback of an error")
    return parser


def interrupted(args: argparse.Namespace) -> str:
    """One line for Ctrl-C: what the output directory holds and how to resume."""
    if args.command not in RESUMABLE or not hasattr(args, "out"):
        return "interrupted"
    stored = last_checkpoint(Path(args.out)) if args.command == "train" else stored_units(Path(args.out))
    return f"interrupted; {stored}run the same command again to resume"


def stored_units(out: Path) -> str:
    """How many units the run store in `out` holds ("" when it cannot tell)."""
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
    try:
        args = parser.parse_args(argv)
        return args.func(args) or 0
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"\nbeliefdrift {args.command}: {interrupted(args)}", file=sys.stderr)
        return 130
    except (OSError, ValueError, torch.OutOfMemoryError) as err:  # the user can fix these: say what
        if args.debug:
            traceback.print_exc()
        message = out_of_memory(args.command) if isinstance(err, torch.OutOfMemoryError) else str(err)
        one_line = "; ".join(line.strip() for line in message.splitlines() if line.strip())
        print(f"beliefdrift{f' {args.command}' if args.command else ''}: error: {one_line}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
