"""The multiple-choice question every loader produces and every other module consumes."""

from __future__ import annotations

import string
from dataclasses import dataclass

LETTERS = tuple(string.ascii_uppercase)


@dataclass(frozen=True)
class MCQuestion:
    """One multiple-choice question Q with its option labels 𝒜 (always letters A, B, …).

    `answer` is the correct label; `source` says where the question came from ("file:line" or a
    dataset name) so that every error and every stored row can point back to it.
    """

    id: str
    stem: str
    choices: tuple[str, ...]
    labels: tuple[str, ...]
    answer: str
    source: str = ""

    def __post_init__(self) -> None:
        if len(self.choices) < 2:
            raise ValueError(f"{self.source or self.id}: a question needs at least two choices")
        if len(self.labels) != len(self.choices):
            raise ValueError(f"{self.source or self.id}: {len(self.labels)} labels for {len(self.choices)} choices")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError(f"{self.source or self.id}: duplicate labels {self.labels}")
        if self.answer not in self.labels:
            raise ValueError(f"{self.source or self.id}: answer {self.answer!r} is not one of {self.labels}")

    @property
    def answer_index(self) -> int:
        """Index of the correct option in `labels`."""
        return self.labels.index(self.answer)

    @property
    def num_choices(self) -> int:
        return len(self.choices)
