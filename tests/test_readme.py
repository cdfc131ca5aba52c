"""The README's Python examples run as written (on the embedded default model), and the package root's API is
what it says: every exported name resolves to a documented object, none of them imported before first use."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import beliefdrift

README = Path(__file__).resolve().parents[1] / "README.md"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def python_blocks() -> list[str]:
    return PYTHON_BLOCK.findall(README.read_text())


def test_readme_has_python_examples() -> None:
    assert python_blocks(), "README.md has no ```python block"


@pytest.mark.integration
@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_python_block_runs(index: int, capsys: pytest.CaptureFixture) -> None:
    code = python_blocks()[index]
    exec(compile(code, f"README.md python block {index + 1}", "exec"), {"__name__": "__readme__"})
    assert capsys.readouterr().out.strip(), "the example printed nothing"


def test_api_names_resolve_with_docstrings() -> None:
    for name in beliefdrift.__all__:
        value = getattr(beliefdrift, name)
        assert name == "__version__" or (value.__doc__ or "").strip(), f"beliefdrift.{name} has no docstring"
        assert name in dir(beliefdrift)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        beliefdrift.nope  # noqa: B018


def test_import_is_lazy() -> None:
    code = "import sys, beliefdrift; print(sorted({'torch', 'transformers', 'numpy'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
