"""The rule of docs/architecture.md, what may import what, read off the sources' module-level imports (imports
inside a function or under TYPE_CHECKING happen later or never, so they do not count)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "beliefdrift"
HEAVY = ("torch", "transformers", "peft", "accelerate", "matplotlib")
#: Settings and names: plain data, importable without torch (the CLI's --help imports only these and commands/).
PLAIN = ("beliefdrift.config.options", "beliefdrift.registry", "beliefdrift.config.evaluate",
         "beliefdrift.config.diagnostics", "beliefdrift.config.train", "beliefdrift.config.reasoning",
         "beliefdrift.cli.main", *(f"beliefdrift.cli.{path.stem}" for path in (PACKAGE / "cli").glob("*.py")))


def module_file(name: str) -> Path:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


@cache
def top_level_imports(name: str) -> frozenset[str]:
    """The modules `name` imports when it is imported (its package's __init__ included)."""
    tree = ast.parse(module_file(name).read_text())
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names
                         if module_file(f"{node.module}.{alias.name}").exists())
    parent = name.rpartition(".")[0]
    if parent and parent != "beliefdrift":
        found.add(parent)
    return frozenset(found)


def reachable(name: str) -> set[str]:
    seen, todo = set(), [name]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        if module.split(".")[0] == "beliefdrift" and module_file(module).exists():
            todo.extend(top_level_imports(module))
    return seen


@pytest.mark.parametrize("name", PLAIN)
def test_settings_and_commands_import_no_torch_nor_the_backend(name: str) -> None:
    imported = reachable(name)
    assert not {m for m in imported if m.split(".")[0] in HEAVY}, name
    assert not {m for m in imported if m.startswith("beliefdrift.backend")}, name


@pytest.mark.parametrize("layer", ["beliefdrift.metrics.functional", "beliefdrift.report", "beliefdrift.registry",
                                   "beliefdrift.data"])
def test_metrics_report_and_data_never_import_the_backend(layer: str) -> None:
    """Metrics work on arrays, reports on stored rows, data on files: none of them needs a model."""
    modules = [layer] if module_file(layer).name != "__init__.py" else [
        f"{layer}.{path.stem}" for path in module_file(layer).parent.glob("*.py") if path.stem != "__init__"]
    for module in modules:
        assert not {m for m in top_level_imports(module) if m.startswith("beliefdrift.backend")}, module
