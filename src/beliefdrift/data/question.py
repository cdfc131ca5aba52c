"""The multiple-choice question every loader produces and every other module consumes, and the file a run keeps
its questions in (`QUESTIONS_FILE`, beside its run store: what the explorer shows, whatever the dataset)."""

from __future__ import annotations

import json
import string
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from beliefdrift.files import write_atomic

LETTERS = tuple(string.ascii_uppercase)
#: A run's questions as it ran them, one JSON object per line (`MCQuestion`'s fields), beside its run store.
QUESTIONS_FILE = "questions.jsonl"


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


def write_questions(directory: Path, questions: Sequence[MCQuestion]) -> Path:
    """Write `questions` as `directory/QUESTIONS_FILE` (unless it is there already: a run resumed with the same
    identity ran the same questions, and a file of that name that is not the run's is left alone)."""
    path = Path(directory) / QUESTIONS_FILE
    if not path.exists():
        write_atomic(path, "".join(json.dumps(asdict(q), ensure_ascii=False) + "\n" for q in questions))
    return path


def read_questions(directory: Path) -> list[MCQuestion]:
    """The questions of `directory/QUESTIONS_FILE` (OSError, ValueError, TypeError or KeyError where it is missing or
    not such a file)."""
    lines = (Path(directory) / QUESTIONS_FILE).read_text(encoding="utf-8").splitlines()
    questions = []
    for line in filter(str.strip, lines):
        record = json.loads(line)
        questions.append(MCQuestion(id=record["id"], stem=record["stem"], choices=tuple(record["choices"]),
                                    labels=tuple(record["labels"]), answer=record["answer"],
                                    source=record.get("source", "")))
    return questions
