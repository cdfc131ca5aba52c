"""The code base itself: one name per concept across the package, and nothing dead (vulture, where installed)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "beliefdrift"
#: Names every module of a folder defines as one interface: each command module's `add_parser` and `run`
#: (`cli.main.COMMANDS`).
INTERFACES = {("cli", "add_parser"), ("cli", "run")}


def test_no_two_functions_or_classes_share_a_name() -> None:
    """A module-level function or class name means one thing in the whole package (`evaluate` is the Python API's,
    `run_evaluation` the run loop's): a reader, a `grep` and an editor's "go to definition" land on one place."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        folder = path.relative_to(PACKAGE).parts[0]
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (
                    (folder, node.name) not in INTERFACES):
                where[node.name].append(str(path.relative_to(PACKAGE)))
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not shared, f"one name, several definitions: {shared}"
