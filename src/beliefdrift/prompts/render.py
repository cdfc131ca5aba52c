"""Prompt templates (the paper's Appendix D.4) rendered with the model's chat template.

A template is a text file whose `{placeholders}` are filled by name; other braces are left alone. The
rendered template is the user turn; the assistant turn is prefilled (`"Answer: "` for direct query, the
seed answers or nothing for PPR). Models without a chat template get a plain-text layout.

Template ending: the bundled direct and PPR templates close the question's code fence (`{question}`, newline,
the closing fence, newline: ending `fence`, the default). Appendix D.4's figures stop at the opening fence, with the
question appended after it (x_Q = [I; Q]); ending `paper` renders that literally: the user turn ends with the
question's last option, fence unclosed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from beliefdrift.data.question import MCQuestion
from beliefdrift.errors import UserError, not_utf8

DIRECT_TEMPLATE = "direct"
PPR_TEMPLATES = ("ppr-llama", "ppr-olmo")
DEFAULT_PPR_TEMPLATE = "ppr-llama"
DIRECT_PREFILL = "Answer: "
TEMPLATE_ENDINGS = ("fence", "paper")
DEFAULT_TEMPLATE_ENDING = "fence"
_CLOSING_FENCE = "{question}\n```\n"

_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
#: The placeholders a template file may use: a multiple-choice prompt's (`question_prompt`) and a chain-of-thought
#: pairs prompt's (`cot.task`); every template shows the question.
PLACEHOLDERS = ("question", "choice_str", "num_choices", "gen_len", "num_lines")


def load_template(name: str, ending: str = DEFAULT_TEMPLATE_ENDING) -> str:
    """A bundled template by name (`direct`, `ppr-llama`, …) or any text file by path, with its `ending`."""
    path = Path(name).expanduser()
    if path.suffix == ".txt" and path.is_file():
        return with_ending(read_template_file(path), ending, name)
    folder = resources.files("beliefdrift.prompts") / "templates"
    bundled = folder / f"{name}.txt"
    if not bundled.is_file():
        available = sorted(p.name.removesuffix(".txt") for p in folder.iterdir())
        raise FileNotFoundError(f"no prompt template {name!r}; bundled: {available}, or pass a .txt path")
    return with_ending(bundled.read_text(), ending, name)


def read_template_file(path: Path) -> str:
    """A template file's text: UTF-8, showing the question (`{question}`), with no placeholder outside
    `PLACEHOLDERS` (else a UserError naming the file)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(not_utf8(f"--template {path}", err)) from None
    unknown = sorted(set(_PLACEHOLDER.findall(text)) - set(PLACEHOLDERS))
    if "{question}" not in text or unknown:
        problem = f"unknown placeholder(s) {_braced(unknown)}" if unknown else "no {question} placeholder"
        raise UserError(f"--template {path}: {problem}; expected a template that shows the question with "
                        f"{{question}} and uses only {_braced(PLACEHOLDERS)}")
    return text


def _braced(names: Iterable[str]) -> str:
    return ", ".join(f"{{{name}}}" for name in names)


def with_ending(text: str, ending: str, name: str = "template") -> str:
    """`text` as written (`fence`) or cut after its final `{question}` placeholder (`paper`, see the module
    docstring); `paper` needs a template that ends with the question's closing fence."""
    if ending not in TEMPLATE_ENDINGS:
        raise ValueError(f"unknown template ending {ending!r}; expected one of {', '.join(TEMPLATE_ENDINGS)}")
    if ending == "fence":
        return text
    if not text.endswith(_CLOSING_FENCE):
        raise ValueError(f"template ending 'paper' needs {name} to end with {_CLOSING_FENCE!r} (the question "
                         "and its closing fence), which it does not")
    return text.removesuffix(_CLOSING_FENCE) + "{question}"


def fill(template: str, **values: object) -> str:
    """Replace `{name}` placeholders; an unknown placeholder is an error (the bundled templates fill theirs: it names
    a --template file's), other braces stay as they are."""

    def substitute(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise UserError(f"--template: placeholder {{{key}}} has no value in this prompt; expected one of "
                            f"{_braced(sorted(values))}")
        return str(values[key])

    return _PLACEHOLDER.sub(substitute, template)


def format_question(question: MCQuestion) -> str:
    """The question as shown to the model: the stem, then one `L. text` line per option."""
    options = "\n".join(f"{label}. {text}" for label, text in zip(question.labels, question.choices, strict=True))
    return f"{question.stem}\n{options}"


def question_prompt(
    template: str, question: MCQuestion, gen_len: int = 100, ending: str = DEFAULT_TEMPLATE_ENDING
) -> str:
    """The user turn for an MCQ template with the given `ending`."""
    return fill(
        load_template(template, ending),
        question=format_question(question),
        choice_str=", ".join(question.labels),
        num_choices=question.num_choices,
        gen_len=gen_len,
    )
