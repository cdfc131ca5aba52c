"""The rule of docs/architecture.md, what may import what, read off the sources' module-level imports (imports
inside a function or under TYPE_CHECKING happen later or never, so they do not count)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "beliefdrift"
HEAVY = ("torch", "transformers", "peft", "accelerate", "matplotlib")
#: The layers from the bottom up (docs/architecture.md): a module imports its own layer and those below it only.
LAYERS = ("root", "data", "prompts", "config", "metrics", "backend", "engine", "diagnostics", "cot", "runs",
          "amortize", "report", "cli")
#: The one import that goes up: the chain-of-thought figures are drawn with the report's plotting helpers.
UPWARD = {("beliefdrift.cot.plot", "beliefdrift.report.plots")}


def modules_of(folder: str) -> list[str]:
    return [f"beliefdrift.{folder}.{path.stem}" for path in sorted((PACKAGE / folder).glob("*.py"))
            if path.stem != "__init__"] + [f"beliefdrift.{folder}"]


#: Settings and names: plain data, importable without torch (the CLI's --help imports only these and cli/).
PLAIN = ("beliefdrift.registry", *modules_of("config"), *modules_of("cli"))


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


@pytest.mark.parametrize("folder", ["metrics", "report", "data", "config"])
def test_metrics_report_data_and_config_never_import_the_backend(folder: str) -> None:
    """Metrics work on arrays, reports on stored rows, data on files, settings are plain data: none needs a model."""
    for module in modules_of(folder):
        assert not {m for m in top_level_imports(module) if m.startswith("beliefdrift.backend")}, module


def layer_of(module: str) -> str:
    """The folder under the package a module sits in, or "root" (`__main__`, the entry point, counts as cli)."""
    parts = module.split(".")
    if parts[1:] == ["__main__"]:
        return "cli"
    return parts[1] if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else "root"


def all_modules() -> list[str]:
    return ["beliefdrift" + "".join(f".{part}" for part in path.relative_to(PACKAGE).with_suffix("").parts
                                    if part != "__init__") for path in sorted(PACKAGE.rglob("*.py"))]


def test_every_folder_is_a_known_layer() -> None:
    assert {layer_of(module) for module in all_modules()} == set(LAYERS)


@pytest.mark.parametrize("module", all_modules())
def test_imports_only_go_down_the_layers(module: str) -> None:
    own = LAYERS.index(layer_of(module))
    upward = {target for target in top_level_imports(module) if target.split(".")[0] == "beliefdrift"
              and LAYERS.index(layer_of(target)) > own and (module, target) not in UPWARD}
    assert not upward, f"{module} ({layer_of(module)}) imports a layer above it: {sorted(upward)}"
