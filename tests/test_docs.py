"""The docs site is checked, not only written: it builds with `mkdocs build --strict` (a broken link, a missing
anchor or an API reference that does not resolve fails), its CLI reference is what the parsers say, and every
public name of the package has an API entry. The built site is opened from disk in headless Chromium
(`tests/browser.py`): every navigation link lands on a page, search finds a page, nothing is loaded from the network
(no console error), no code block is wider than its column, and headings show their maths. The pages' Python blocks
run in `tests/test_readme.py`."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser import chromium, console_errors, wait_for

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


@pytest.fixture(scope="module")
def browser():  # noqa: ANN201 (selenium's WebDriver, imported only where installed)
    yield from chromium()


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
