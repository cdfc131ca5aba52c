"""The docs site is checked, not only written: it builds with `mkdocs build --strict` (a broken link, a missing
anchor or an API reference that does not resolve fails), its CLI reference is what the parsers say, and every
public name of the package has an API entry. The pages' Python blocks run in `tests/test_readme.py`."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import beliefdrift

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SITE_PACKAGES = ("mkdocs", "material", "mkdocstrings_handlers.python", "latex2mathml")


def load_gen_cli():
    spec = importlib.util.spec_from_file_location("gen_cli", DOCS / "gen_cli.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_generated_from_the_parsers() -> None:
    text = load_gen_cli().render()
    assert (DOCS / "cli.md").read_text() == text, "docs/cli.md is out of date: run `python docs/gen_cli.py`"
    for flag in ("--paths", "--methods", "--adapter", "--noise-floor-replicates", "--prefix-lengths"):
        assert f"`{flag}`" in text


def api_members() -> dict[str, set[str]]:
    """`::: module` blocks of docs/api.md and the members each lists."""
    blocks = re.findall(r"^::: (\S+)\n((?:    .*\n|\s*\n)*)", (DOCS / "api.md").read_text(), re.MULTILINE)
    return {module: set(re.findall(r"\w+", re.search(r"members: \[(.*?)\]", body, re.DOTALL)[1]))
            for module, body in blocks}


def test_api_reference_lists_every_public_name_under_its_module() -> None:
    members = api_members()
    missing = [f"{module}.{name}" for module, names in beliefdrift._EXPORTS.items() for name in names
               if name not in members.get(module, set())]
    assert not missing, f"docs/api.md lacks {missing}"


@pytest.mark.skipif(any(importlib.util.find_spec(name.split(".")[0]) is None for name in SITE_PACKAGES),
                    reason="the docs extra is not installed (pip install '.[docs]')")
def test_site_builds_strictly(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                            cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    api = (tmp_path / "api" / "index.html").read_text()
    assert "martingale_posterior_mean" in api and "<math" in (tmp_path / "concepts" / "index.html").read_text()


def test_readme_links_resolve() -> None:
    """The README is read on a code host, outside the site: its relative links must name files of the checkout."""
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    local = [link for link in links if "://" not in link]
    assert local, "the README links into the docs"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README.md links to missing files: {missing}"
