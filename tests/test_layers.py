"""The rule of docs/architecture.md, what may import what, read off the sources' imports: those a module makes when
it is imported (what `--help` loads) and those it makes at all, inside its functions too (where a circle hides).
Imports under `if TYPE_CHECKING:` never run, so they do not count."""

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


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _imported(node: ast.Import | ast.ImportFrom) -> set[str]:
    """The package's modules (and others' top names) an import statement names: `from pkg import sub` names the
    module `pkg.sub` where it is one, else `pkg`."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if not node.module or node.level:
        return set()
    submodules = {f"{node.module}.{alias.name}" for alias in node.names
                  if module_file(f"{node.module}.{alias.name}").exists()}
    return submodules if len(submodules) == len(node.names) else submodules | {node.module}


@cache
def all_imports(name: str) -> frozenset[str]:
    """Every module `name` imports, at the top or inside a function (what an `if TYPE_CHECKING:` block imports
    aside: it never runs)."""
    found: set[str] = set()
    todo: list[ast.AST] = [ast.parse(module_file(name).read_text())]
    while todo:
        node = todo.pop()
        if _is_type_checking(node):
            todo.extend(node.orelse)  # type: ignore[attr-defined]
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= _imported(node)
        todo.extend(ast.iter_child_nodes(node))
    return frozenset(m for m in found if m != name)


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
    """At the top of a module and inside its functions alike (the package root, the face that names every layer's
    public names, imports them only under TYPE_CHECKING and on first use)."""
    own = LAYERS.index(layer_of(module))
    upward = {target for target in all_imports(module) if target.split(".")[0] == "beliefdrift"
              and LAYERS.index(layer_of(target)) > own and (module, target) not in UPWARD}
    assert not upward, f"{module} ({layer_of(module)}) imports a layer above it: {sorted(upward)}"


def circles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively): modules that
    import each other, directly or around a loop."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_modules_import_each_other() -> None:
    """No circle of imports, counting those inside functions: each module can be read knowing only what it imports."""
    modules = set(all_modules())
    graph = {module: frozenset(m for m in all_imports(module) if m in modules) for module in modules}
    assert not circles(graph), circles(graph)


def test_the_circle_finder_finds_a_circle_through_a_function() -> None:
    assert circles({"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"})}) == [
        ["a", "b", "c"]]
    assert circles({"a": frozenset({"b"}), "b": frozenset()}) == []
    code = "import x\nif TYPE_CHECKING:\n    import y\ndef f():\n    from beliefdrift import z\n"
    found: set[str] = set()
    todo: list[ast.AST] = [ast.parse(code)]
    while todo:
        node = todo.pop()
        if _is_type_checking(node):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= _imported(node)
        todo.extend(ast.iter_child_nodes(node))
    assert found == {"x", "beliefdrift"}


#: What tells the kinds of model apart: only `backend/` may name it (docs/architecture.md, "The model interface").
KINDS = {"is_served", "ServedModel", "ServedBatch", "ServedRollouts", "Endpoint"}


def test_nothing_above_the_backend_asks_which_model_it_holds() -> None:
    """Above `backend/` a model is a `LanguageModel`: no module names a served model's classes or `is_served`, or
    asks whether something is a torch module (`isinstance(x, torch.nn.Module)`)."""
    asking = []
    for module in all_modules():
        if layer_of(module) == "backend":
            continue
        for node in ast.walk(ast.parse(module_file(module).read_text())):
            named = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if named in KINDS or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                                  and node.func.id == "isinstance" and "Module" in ast.unparse(node.args[1])):
                asking.append(f"{module}:{node.lineno} {ast.unparse(node)[:60]}")
    assert not asking, asking


#: Where private names of torch and transformers may appear (docs/architecture.md, backend/compat.py).
PRIVATE_HOME = "beliefdrift.backend.compat"
#: Private names of the standard library the package uses, which the rule below would otherwise flag, and why.
STDLIB_PRIVATE = {
    "_SubParsersAction": "argparse: the type `add_subparsers()` returns, for type hints",
    "_ArgumentGroup": "argparse: the type `add_argument_group()` returns, for type hints",
    "_actions": "argparse: a parser's actions, to find a command's subparser (config/options.py)",
    "_option_string_actions": "argparse: a parser's flags, for 'did you mean' (config/options.py)",
    "_replace": "collections.namedtuple: documented public API despite the underscore",
    "_exit": "os: documented public API (leave a process at once, runs/distributed.py)",
}


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_names(tree: ast.AST) -> list[tuple[str, int]]:
    """Every private name a module reaches: `x._name`, getattr/setattr/hasattr/delattr(x, "_name"), and imports of a
    `_name` or from a `_module` (`from torch._dynamo.utils import counters`)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            found.append((node.attr, node.lineno))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and is_private(node.args[1].value)):
            found.append((node.args[1].value, node.lineno))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            paths = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [
                f"{node.module or ''}.{alias.name}" for alias in node.names]
            found += [(part, node.lineno) for path in paths for part in path.split(".") if is_private(part)]
    return found


def defined_names(tree: ast.AST) -> set[str]:
    """The names a module defines: functions, classes, assigned names and annotated fields, and the attributes it
    assigns on `self` or `cls` (an attribute assigned on another object may be that object's own)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for part in ast.walk(target):
                    if isinstance(part, ast.Name):
                        names.add(part.id)
                    elif (isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name)
                          and part.value.id in ("self", "cls")):
                        names.add(part.attr)
    return names


def test_private_names_of_torch_and_transformers_appear_only_in_compat() -> None:
    """A private name is one that starts with a single underscore (not a dunder) and that the package does not define
    itself: reached on another library's module or object, in any module of src/ but `backend/compat.py`, it is a
    name of torch or transformers (or one of `STDLIB_PRIVATE`), which a minor release may move. The package's own are
    the names its modules define (`defined_names`: its `_helpers`, the `self._fields` of its classes) and the marks it
    sets on a model, named `_beliefdrift_*`."""
    trees = {module: ast.parse(module_file(module).read_text()) for module in all_modules()}
    ours = set().union(*(defined_names(tree) for module, tree in trees.items() if module != PRIVATE_HOME))
    outside = [f"{module}:{line} {name}" for module, tree in trees.items() if module != PRIVATE_HOME
               for name, line in private_names(tree)
               if name not in ours and name not in STDLIB_PRIVATE and not name.startswith("_beliefdrift_")]
    assert not outside, f"private names of torch/transformers outside {PRIVATE_HOME}: {outside}"
    assert {name for name, _ in private_names(trees[PRIVATE_HOME])} - ours >= {
        "_dynamo", "_attn_implementation", "_can_set_attn_implementation", "_scaled_dot_product_efficient_attention"}


def test_the_private_name_rule_sees_every_way_to_reach_one() -> None:
    code = ("import torch._dynamo\nfrom torch._dynamo.utils import counters\nfrom transformers import _private\n"
            "torch.ops.aten._scaled_dot_product_efficient_attention\n"
            "getattr(model, '_can_set_attn_implementation')\nmodel.config.__class__\n")
    found = sorted(private_names(ast.parse(code)), key=lambda name_line: name_line[1])
    assert found == [("_dynamo", 1), ("_dynamo", 2), ("_private", 3), ("_scaled_dot_product_efficient_attention", 4),
                     ("_can_set_attn_implementation", 5)]
