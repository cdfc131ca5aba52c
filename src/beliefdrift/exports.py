"""A package's public names, imported on first use (PEP 562), written once: the `if TYPE_CHECKING:` block of its
`__init__.py` imports each as `from MODULE import NAME as NAME`, for editors and type checkers, and at run time
`lazy_exports` reads that block and imports NAME from MODULE when it is first asked for. An import from the package
itself (`from beliefdrift import metrics as metrics`) names a sub-package: the next tier of names."""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def type_checking_imports(source: str) -> dict[str, str]:
    """{name: module} of every `from MODULE import NAME as NAME` in the top-level `if TYPE_CHECKING:` blocks of the
    Python `source`; any other statement there is a ValueError (the block lists exports and nothing else)."""
    where: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                if not (isinstance(statement, ast.ImportFrom) and statement.module and not statement.level
                        and all(alias.asname == alias.name for alias in statement.names)):
                    raise ValueError(f"not an export (from MODULE import NAME as NAME): {ast.unparse(statement)}")
                where |= {alias.name: statement.module for alias in statement.names}
    return where


def lazy_exports(package: str) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """`__getattr__`, `__dir__` and `__all__` for `package`: each name its `TYPE_CHECKING` block imports
    (`type_checking_imports`) is imported from its module on first access (a sub-package imported itself) and then
    kept in the package's namespace."""
    namespace = sys.modules[package].__dict__
    where = type_checking_imports(Path(namespace["__file__"]).read_text(encoding="utf-8"))

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = (importlib.import_module(f"{package}.{name}") if module == package
                 else getattr(importlib.import_module(module), name))
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__, sorted(where)
