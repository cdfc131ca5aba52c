"""A question posed for thought–answer pairs: its prompts (the paper's Appendix F templates and a direct
chain-of-thought prompt for reasoning seeds) and how its free-text answers are normalised."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from beliefdrift.data.loaders import MathProblem
from beliefdrift.data.question import MCQuestion
from beliefdrift.prompts import fill, format_question, load_template

COT_TEMPLATE = "cot-direct"
PAIR_TEMPLATES = {"gsm8k": "reasoning-gsm8k", "gpqa": "reasoning-gpqa", "mcqa": "reasoning-mcqa"}


def pairs_template(dataset: str, items: Sequence[MCQuestion | MathProblem] = ()) -> str:
    """The pairs prompt for a dataset: the paper's for GSM8K and GPQA, for a data file the one of its kind (the
    GSM8K prompt for math problems), the MCQA variant for the others."""
    if dataset in PAIR_TEMPLATES:
        return PAIR_TEMPLATES[dataset]
    math = bool(items) and isinstance(items[0], MathProblem)
    return PAIR_TEMPLATES["gsm8k" if math else "mcqa"]


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_LETTER = re.compile(r"(?<![A-Za-z])([A-Z])(?![A-Za-z])")


@dataclass(frozen=True)
class ReasoningTask:
    """One question for the chain-of-thought extension.

    `kind` is "integer" (GSM8K: answers are whole numbers) or "choice" (answers are option labels);
    `gold` is the correct answer in normalised form ("72", "B").
    """

    id: str
    text: str
    gold: str
    kind: str
    template: str
    labels: tuple[str, ...] = ()

    @classmethod
    def from_item(cls, item: MCQuestion | MathProblem, template: str | None = None) -> ReasoningTask:
        """A GSM8K problem or a multiple-choice question with its pairs prompt (default: the GSM8K prompt
        for math problems, the MCQA variant for multiple-choice questions; see `pairs_template`)."""
        if isinstance(item, MathProblem):
            return cls(item.id, item.question, str(item.answer), "integer", template or PAIR_TEMPLATES["gsm8k"])
        return cls(item.id, format_question(item), item.answer, "choice", template or PAIR_TEMPLATES["mcqa"],
                   item.labels)

    def pairs_prompt(self, num_lines: int) -> str:
        """The user turn asking for `num_lines` independent (solution, answer) pairs."""
        return fill(
            load_template(self.template), question=self.text, num_lines=num_lines, choice_str=", ".join(self.labels)
        )

    def cot_prompt(self) -> str:
        """The user turn asking for a single (solution, answer) pair: the reasoning-seed prompt."""
        if self.kind == "integer":
            problem, answer_format = "math problem", "INTEGER"
        else:
            problem, answer_format = "multiple-choice question", f"one letter among ({', '.join(self.labels)})"
        return fill(load_template(COT_TEMPLATE), problem=problem, answer_format=answer_format, question=self.text)

    def normalize(self, answer: str | None) -> str | None:
        """The answer in comparable form: the last number as an integer ("1,200.00" → "1200") or the first
        standalone option label; None when there is none (or a non-integer number for GSM8K)."""
        if answer is None:
            return None
        if self.kind == "integer":
            numbers = _NUMBER.findall(answer)
            if not numbers:
                return None
            number = numbers[-1].replace(",", "")
            if "." not in number:
                return str(int(number))
            value = float(number)
            return str(int(value)) if value.is_integer() else None
        return next((m for m in _LETTER.findall(answer) if m in self.labels), None)
