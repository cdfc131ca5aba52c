"""The code base itself: one name per concept across the package, and nothing dead (vulture, where installed)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

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


def type_checking_names(package: Path) -> dict[str, set[str]]:
    """{module: names} the `if TYPE_CHECKING:` block of a package's `__init__.py` imports."""
    found: dict[str, set[str]] = defaultdict(set)
    for node in ast.parse((package / "__init__.py").read_text()).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module, ast.unparse(statement)
                # `name as name`: a re-export under mypy --strict (no implicit re-exports)
                assert all(alias.asname == alias.name for alias in statement.names), ast.unparse(statement)
                found[statement.module] |= {alias.name for alias in statement.names}
    return dict(found)


@pytest.mark.parametrize("package", ["", "backend", "data", "diagnostics", "amortize", "cot", "prompts", "metrics"])
def test_the_type_checking_block_lists_the_lazy_exports(package: str) -> None:
    """An editor completes `bd.` and a type checker knows each name's type from the `if TYPE_CHECKING:` imports; at
    run time `lazy_exports` imports the same names from the same modules on first use (`_EXPORTS`)."""
    module = importlib.import_module(f"beliefdrift.{package}".rstrip("."))
    exports = {name: set(names) for name, names in module._EXPORTS.items()}
    assert type_checking_names(PACKAGE / package) == exports


def test_nothing_in_src_is_dead() -> None:
    """vulture finds no function, class, attribute or variable of the package that nothing reads, beyond the ones
    tests/vulture_whitelist.py names (read by a framework, by users, or by the tests and bench/)."""
    pytest.importorskip("vulture")
    found = subprocess.run([sys.executable, "-m", "vulture", "src", "tests/vulture_whitelist.py"], cwd=ROOT,
                           capture_output=True, text=True)
    assert found.returncode == 0 and not found.stdout, found.stdout + found.stderr
