"""The docs site is checked, not only written: it builds with `mkdocs build --strict` (a broken link, a missing
anchor or an API reference that does not resolve fails), its CLI reference is what the parsers say, and every
public name of the package has an API entry. The built site is opened from disk in headless Chromium
(`tests/browser.py`): every navigation link lands on a page, search finds a page, nothing is loaded from the network
(no console error), no code block is wider than its column, and headings show their maths. The pages' Python blocks
run in `tests/test_readme.py`."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from browser import console_errors, wait_for

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
    from beliefdrift.exports import type_checking_imports

    members = api_members()
    exports = type_checking_imports(Path(beliefdrift.__file__).read_text())
    missing = [f"{module}.{name}" for name, module in exports.items()
               if module != "beliefdrift" and name not in members.get(module, set())]
    assert not missing, f"docs/api.md lacks {missing}"


def test_every_name_of_the_api_reference_is_reachable_as_documented() -> None:
    """docs/api.md: "`import beliefdrift as bd` gives the names below": each listed member is `bd.<name>`, the
    object its module block names."""
    assert "`import beliefdrift as bd` gives the names below" in (DOCS / "api.md").read_text()
    unreachable = [f"{module}.{name}" for module, names in api_members().items() for name in sorted(names)
                   if getattr(beliefdrift, name, None) is not getattr(importlib.import_module(module), name)]
    assert not unreachable, f"docs/api.md lists names that are not bd.<name>: {unreachable}"



def test_the_guides_use_only_the_public_namespace() -> None:
    """The README, getting started and the tutorials teach `import beliefdrift as bd`: their Python examples import no
    internal module (the architecture page, for contributors, may)."""
    pages = [ROOT / "README.md", DOCS / "getting-started.md", *sorted((DOCS / "tutorials").glob("*.md"))]
    internal = [f"{page.relative_to(ROOT)}: {line.strip()}" for page in pages
                for block in re.findall(r"^```python\n(.*?)^```$", page.read_text(), re.MULTILINE | re.DOTALL)
                for line in block.splitlines() if re.match(r"\s*(from|import) beliefdrift\.", line)]
    assert not internal, f"examples import internal modules: {internal}"

# ------------------------------------------------------------------------------------------- architecture.md

ARCHITECTURE = DOCS / "architecture.md"


def documented_schema() -> dict[str, list[str]]:
    """The run-store table of docs/architecture.md: {table: its columns}, a column being a `name` of the columns
    cell outside parentheses."""
    section = ARCHITECTURE.read_text().split("## The run store", 1)[1]
    schema = {}
    for table, columns in re.findall(r"^\| `(\w+)` \| (.*?) \| [^|]* \|$", section, re.MULTILINE):
        depth, top = 0, []
        for char in columns:
            depth += (char == "(") - (char == ")")
            top.append(char if depth == 0 else " ")
        schema[table] = re.findall(r"`(\w+)`", "".join(top))
    return schema


def test_the_architecture_page_gives_the_run_store_schema(tmp_path: Path) -> None:
    """The store's tables and columns as `sqlite_master` has them after `RunStore.open` creates a store, in order."""
    import sqlite3

    from beliefdrift.runs.store import RunStore

    with RunStore.open(tmp_path / "run.sqlite"):
        pass
    db = sqlite3.connect(tmp_path / "run.sqlite")
    tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
    actual = {table: [row[1] for row in db.execute(f"PRAGMA table_info({table})")] for table in tables}
    db.close()
    assert documented_schema() == actual


def defined_in(module: Any, name: str) -> bool:
    """Whether `name` is defined (def, class or assignment) at the top level of `module`'s source, not imported."""
    tree = ast.parse(Path(module.__file__).read_text())
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def package_modules() -> list[str]:
    """Every module of the package, dotted (`beliefdrift.backend.loading`, …)."""
    root = Path(beliefdrift.__file__).parent
    return [".".join(("beliefdrift", *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
            for path in root.rglob("*.py")]


def test_the_architecture_page_names_each_thing_where_it_is_defined() -> None:
    """A `module.name` (or `folder/module.name`) of docs/architecture.md is defined in that module, not only
    imported there: a page that sends a reader to the wrong file is wrong (the bundled models' `REGISTRY` is
    `registry.py`'s, which `backend/loading.py` imports). A module is named by its path under the package or by
    its last parts (`shared_prefix.…`) where only one module ends so; `bd.` and `beliefdrift.` are the package
    root; a package's lazily exported names (`__all__`) count as its own; another library's names (`torch.compile`)
    are left alone."""
    modules = package_modules()
    text = ARCHITECTURE.read_text()
    references = set(re.findall(r"`([a-z_][\w/]*(?:\.[A-Za-z_]\w*)+)(?:\([^`]*\))?`", text))
    wrong = []
    for reference in sorted(references):
        if re.search(r"\.(py|md|txt|jsonl?|js|yaml|png|pdf|csv|sqlite|html)$", reference):
            continue
        parts = reference.replace("/", ".").split(".")
        if parts[0] in ("bd", "beliefdrift"):
            module, attrs = beliefdrift, parts[1:]
        else:
            found = [(m, k) for k in range(len(parts) - 1, 0, -1) for m in modules
                     if m == "beliefdrift." + ".".join(parts[:k])]  # the path under the package, else a tail
            found = found or [(m, k) for k in range(len(parts) - 1, 0, -1) for m in modules
                              if m.endswith("." + ".".join(parts[:k]))]
            if not found:
                if importlib.util.find_spec(parts[0]) is None:
                    wrong.append(reference)
                continue
            name, k = found[0]
            if sum(f[1] == k for f in found) > 1:
                wrong.append(f"{reference} (ambiguous)")
                continue
            module, attrs = importlib.import_module(name), parts[k:]
        value: Any = module
        for attr in attrs:
            value = getattr(value, attr, None)
        package = Path(module.__file__).name == "__init__.py"  # its lazily exported names count as its own
        own = defined_in(module, attrs[0]) or package and attrs[0] in getattr(module, "__all__", ())
        if value is None or not own:
            wrong.append(reference)
    assert not wrong, f"docs/architecture.md names things where they are not defined: {wrong}"


needs_docs_extra = pytest.mark.skipif(
    any(importlib.util.find_spec(name.split(".")[0]) is None for name in SITE_PACKAGES),
    reason="the docs extra is not installed (pip install '.[docs]')")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as `make docs` builds it (`mkdocs build --strict`), into a temporary directory."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                            cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@needs_docs_extra
def test_site_builds_strictly(site: Path) -> None:
    api = (site / "api.html").read_text()
    assert "martingale_posterior_mean" in api and "<math" in (site / "concepts.html").read_text()


#: Per page: [the site's links of the navigation (the page's own table of contents aside)], [code blocks wider than
#: their box: scrollWidth, clientWidth, first line], [table-of-contents entries still showing LaTeX].
PAGE_FACTS = r"""
const own = new Set([...document.querySelectorAll('nav.md-nav--secondary a')]);
return [
  [...document.querySelectorAll('nav.md-nav--primary a.md-nav__link[href]')].filter(a => !own.has(a)).map(a => a.href),
  [...document.querySelectorAll('.md-content pre > code')].filter(c => c.scrollWidth > c.clientWidth + 1)
    .map(c => [c.scrollWidth, c.clientWidth, c.textContent.split('\n')[0]]),
  [...document.querySelectorAll('nav a')].map(a => a.textContent).filter(t => t.includes('\\(')),
];
"""


@needs_docs_extra
def test_the_site_opened_from_disk(site: Path, browser) -> None:  # noqa: ANN001
    """Issue 39 §4: from file:// every navigation link is a page (not a directory listing), search answers, no
    font or script is fetched from the network, code wraps rather than running off the right edge, and a heading's
    maths is MathML (in the page and in its table of contents)."""
    from selenium.webdriver.common.by import By

    pages, seen, problems = [(site / "index.html").as_uri()], set(), []
    while pages:  # every page the navigation reaches, each loaded once
        url = pages.pop()
        if url in seen:
            continue
        seen.add(url)
        browser.get(url)
        links, wide, latex = browser.execute_script(PAGE_FACTS)
        path = Path(url.removeprefix("file://"))
        problems += [f"{path.name}: console: {entry['message']}" for entry in console_errors(browser)]
        problems += [f"{path.name}: code block {w} px wide in {c} px: {line!r}" for w, c, line in wide]
        problems += [f"{path.name}: table of contents shows LaTeX: {text.strip()!r}" for text in latex]
        for link in links:
            target = link.split("#")[0]
            if not (target.startswith("file://") and Path(target.removeprefix("file://")).is_file()):
                problems.append(f"{path.name}: navigation link {link} is not a page")
            else:
                pages.append(target)
    assert not problems, "\n".join(problems)
    assert len(seen) >= 25  # the nav of mkdocs.yml: every page was visited

    browser.get((site / "concepts.html").as_uri())
    assert browser.execute_script("return document.querySelector('h2#the-belief-theta_n math') !== null")
    browser.execute_script("document.querySelector('label[for=__search]').click()")
    browser.find_element(By.CSS_SELECTOR, "input[data-md-component=search-query]").send_keys("martingale")
    hits = wait_for(browser, "const a = [...document.querySelectorAll('.md-search-result__item a')];"
                             "return a.length && a.map(x => x.href)")
    assert any(hit.split("#")[0].endswith("/api.html") for hit in hits), hits
    assert console_errors(browser) == []


def test_readme_links_resolve() -> None:
    """The README is read on a code host, outside the site: its relative links must name files of the checkout."""
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    local = [link for link in links if "://" not in link]
    assert local, "the README links into the docs"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README.md links to missing files: {missing}"
