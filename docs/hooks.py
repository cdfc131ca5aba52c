"""MkDocs hook: the maths of the docs as MathML, rendered by the browser itself (no script, works offline).

Pages write LaTeX between `$…$` (inline) or `$$…$$` (display); `pymdownx.arithmatex` (generic mode) keeps it
away from Markdown and wraps it in `<span class="arithmatex">\\(…\\)</span>` or `<div class="arithmatex">\\[…\\]</div>`,
which this hook replaces with latex2mathml's MathML (display maths inside its div, which scrolls when wider than
the column), in the page and in its table of contents (where a heading's maths reaches the theme as `\\(…\\)`
text). It also drops the Sphinx roles some docstrings use (":func:`x`" shows as `x`).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import Any

from latex2mathml.converter import convert

SPHINX_ROLE = re.compile(r":(?:func|class|meth|data|attr|mod):(?=<code>)")
MATH = re.compile(r'<(span|div) class="arithmatex">\\[(\[](.*?)\\[)\]]</\1>', re.DOTALL)
TOC_MATH = re.compile(r"\\\((.*?)\\\)", re.DOTALL)


def to_mathml(latex: str, display: str = "inline") -> str:
    return convert(html.unescape(latex).strip(), display=display)


def typeset(match: re.Match) -> str:
    """One arithmatex span (inline) or div (display, kept as the block that scrolls) as MathML."""
    if match.group(1) == "div":
        return f'<div class="arithmatex">{to_mathml(match.group(2), "block")}</div>'
    return to_mathml(match.group(2))


def typeset_toc(items: Iterable[Any]) -> None:
    """Each table-of-contents entry's `\\(…\\)` as MathML, its children's too."""
    for item in items:
        item.title = TOC_MATH.sub(lambda match: to_mathml(match.group(1)), item.title)
        typeset_toc(item.children)


def on_page_content(content: str, page: Any, **_: object) -> str:
    typeset_toc(page.toc)
    return SPHINX_ROLE.sub("", MATH.sub(typeset, content))
