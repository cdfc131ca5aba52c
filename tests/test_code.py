"""The code base itself: one name per concept across the package, nothing dead (vulture, where installed) and no
type error (mypy, where installed)."""

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


def is_overload(node: ast.stmt) -> bool:
    """Whether `node` is an `@overload` signature (of the function defined after it)."""
    decorators = getattr(node, "decorator_list", [])
    return any(isinstance(d, ast.Name) and d.id == "overload" or isinstance(d, ast.Attribute) and d.attr == "overload"
               for d in decorators)


def test_no_two_functions_or_classes_share_a_name() -> None:
    """A module-level function or class name means one thing in the whole package (`evaluate` is the Python API's,
    `run_evaluation` the run loop's): a reader, a `grep` and an editor's "go to definition" land on one place."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        folder = path.relative_to(PACKAGE).parts[0]
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (
                    (folder, node.name) not in INTERFACES) and not is_overload(node):
                where[node.name].append(str(path.relative_to(PACKAGE)))
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not shared, f"one name, several definitions: {shared}"


@pytest.mark.parametrize("package", ["", "backend", "backend.served", "data", "diagnostics", "amortize", "cot",
                                     "prompts", "metrics"])
def test_the_type_checking_block_is_the_lazy_exports(package: str) -> None:
    """An editor completes `bd.` and a type checker knows each name's type from the package's `if TYPE_CHECKING:`
    imports; at run time `lazy_exports` reads that same block and imports each name from its module on first use, so
    the names are written once. Each resolves to what its module defines (no name is also a submodule's, which
    would replace it once imported), and `__all__` lists them."""
    from beliefdrift.exports import type_checking_imports

    module = importlib.import_module(f"beliefdrift.{package}".rstrip("."))
    where = type_checking_imports(Path(module.__file__).read_text())
    names = {name: home for name, home in where.items() if home != module.__name__}  # the rest: sub-packages
    assert names, "no exports read"
    folder = Path(module.__file__).parent
    assert not {name for name in names if (folder / f"{name}.py").exists() or (folder / name).is_dir()}
    for name, home in where.items():
        expected = importlib.import_module(f"{home}.{name}") if name not in names else getattr(
            importlib.import_module(home), name)
        assert getattr(module, name) is expected, name
    assert set(module.__all__) - {"__version__"} == set(where)


def test_an_export_block_holds_exports_only() -> None:
    """Anything in a TYPE_CHECKING block but `from MODULE import NAME as NAME` is refused: it would not be exported
    at run time."""
    from beliefdrift.exports import type_checking_imports

    assert type_checking_imports("if TYPE_CHECKING:\n    from a.b import c as c\n") == {"c": "a.b"}
    for statement in ("from a.b import c", "import a", "x = 1"):
        with pytest.raises(ValueError, match="not an export"):
            type_checking_imports(f"if TYPE_CHECKING:\n    {statement}\n")


def test_nothing_in_src_is_dead() -> None:
    """vulture finds no function, class, attribute or variable of the package that nothing reads, beyond the ones
    tests/vulture_whitelist.py names (read by a framework, by users, or by the tests and bench/)."""
    pytest.importorskip("vulture")
    found = subprocess.run([sys.executable, "-m", "vulture", "src", "tests/vulture_whitelist.py"], cwd=ROOT,
                           capture_output=True, text=True)
    assert found.returncode == 0 and not found.stdout, found.stdout + found.stderr


def test_the_package_type_checks(pytestconfig: pytest.Config, tmp_path: Path) -> None:
    """mypy, with pyproject.toml's `[tool.mypy]` settings (what `make lint` runs), finds no error in the package;
    its cache (pytest's) makes a second run take about a second."""
    api = pytest.importorskip("mypy.api", reason="mypy is not installed (it is in the dev extra)")
    cache = pytestconfig.cache.mkdir("mypy-package") if getattr(pytestconfig, "cache", None) else tmp_path
    stdout, stderr, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache),
                                      str(PACKAGE)])
    assert status == 0, stdout + stderr
