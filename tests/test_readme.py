"""The Python examples of the README and of the docs pages run (on the embedded default model), and the package
root's API is what it says: every exported name resolves to a documented object, none of them imported before first
use.

A block that would take long is marked by a comment on the line above it, `<!-- docs-test: {"n=200": "n=2"} -->`:
the test applies those replacements (each must occur in the block) and runs it at that tiny size; unmarked blocks
run as written."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

import beliefdrift

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PYTHON_BLOCK = re.compile(r"(?:^<!-- docs-test: (?P<tiny>\{[^\n]*\}) -->\n)?^```python\n(?P<code>.*?)^```$",
                          re.MULTILINE | re.DOTALL)


class Block(NamedTuple):
    name: str  # page#index, the test id
    code: str
    tiny: dict[str, str]  # replacements that shrink a long example


def python_blocks() -> list[Block]:
    return [
        Block(f"{page.relative_to(ROOT)}#{i}", match["code"], json.loads(match["tiny"] or "{}"))
        for page in PAGES
        for i, match in enumerate(PYTHON_BLOCK.finditer(page.read_text()), 1)
    ]


def test_readme_has_python_examples() -> None:
    assert any(block.name.startswith("README.md#") for block in python_blocks()), "README.md has no ```python block"


@pytest.mark.integration
@pytest.mark.parametrize("block", python_blocks(), ids=lambda block: block.name)
def test_python_block_runs(block: Block, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch,
                           tmp_path: Path, request: pytest.FixtureRequest) -> None:
    code = block.code
    for old, new in block.tiny.items():
        assert old in code, f"{block.name}: the docs-test replacement {old!r} is not in the block"
        code = code.replace(old, new)
    if re.search(r"load_dataset\(\"(?!demo\")", code):  # a benchmark file: where the suite finds them
        monkeypatch.setenv("BELIEFDRIFT_DATA", str(request.getfixturevalue("data_dir")))
    monkeypatch.chdir(tmp_path)  # whatever an example writes stays out of the checkout
    exec(compile(code, f"{block.name} python block", "exec"), {"__name__": "__docs__"})
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
