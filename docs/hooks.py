"""MkDocs hook: the maths of the docs as MathML, rendered by the browser itself (no script, works offline).

Pages write LaTeX between `$…$` (inline) or `$$…$$` (display); `pymdownx.arithmatex` (generic mode) keeps it
away from Markdown and wraps it in `<span class="arithmatex">\\(…\\)</span>` or `<div class="arithmatex">\\[…\\]</div>`,
which this hook replaces with latex2mathml's MathML. It also drops the Sphinx roles some docstrings use
(":func:`x`" shows as `x`).
"""

from __future__ import annotations

import html
import re

from latex2mathml.converter import convert

SPHINX_ROLE = re.compile(r":(?:func|class|meth|data|attr|mod):(?=<code>)")
MATH = re.compile(r'<(span|div) class="arithmatex">\\[(\[](.*?)\\[)\]]</\1>', re.DOTALL)


def to_mathml(match: re.Match) -> str:
    display = "block" if match.group(1) == "div" else "inline"
    return convert(html.unescape(match.group(2)).strip(), display=display)


def on_page_content(content: str, **_: object) -> str:
    return SPHINX_ROLE.sub("", MATH.sub(to_mathml, content))
