"""`beliefdrift <command>`: each command lives in `beliefdrift.commands.<name>`."""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ["demo", "drift", "emd", "evaluate", "report", "reasoning", "train"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="beliefdrift", description=__doc__.split("\n")[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"beliefdrift.commands.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except (OSError, ValueError) as err:  # bad input or missing files: say what, not a traceback
        print(f"beliefdrift {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
