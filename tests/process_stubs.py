"""Helpers for the diagnostics tests: a stub answer process with a known θ(history), a tiny model whose θ depends on
the answers written so far, and uncached reference computations on real models."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch
from tiny_model import SKY_QUESTION, save_tiny_model

from beliefdrift.backend import AnswerDist, LanguageModel, load_model
from beliefdrift.backend.model import EagerPaths
from beliefdrift.engine.resampling import QuestionRunner

Theta = Callable[[tuple[int, ...]], Sequence[float]]


class HistoryProcess(EagerPaths):
    """An `AnswerProcess` whose θ is a Python function of each path's answer history."""

    def __init__(self, theta: Theta, histories: Sequence[tuple[int, ...]] = ((),)):
        self.theta = theta
        self.histories = [tuple(h) for h in histories]
        self.dist = self._dist()
        self.forward_passes = 0

    def _dist(self) -> AnswerDist:
        probs = torch.tensor([list(self.theta(h)) for h in self.histories], dtype=torch.float64)
        return AnswerDist(probs, torch.ones(len(self.histories)))

    @property
    def size(self) -> int:
        return len(self.histories)

    def select(self, index: torch.Tensor | list[int]) -> HistoryProcess:
        return HistoryProcess(self.theta, [self.histories[int(i)] for i in index])

    def reserve(self, answers: int) -> None:
        """No cache to reserve room in."""

    def advance(self, answers: torch.Tensor) -> AnswerDist:
        rows = answers.reshape(self.size, -1).tolist()
        self.histories = [h + tuple(row) for h, row in zip(self.histories, rows, strict=True)]
        self.dist = self._dist()
        return self.dist


def count_drift(history: tuple[int, ...]) -> list[float]:
    """Two labels; θ(A) = min(0.9, 0.3 + 0.2 · #A in the history): drifts towards A."""
    p = min(0.9, 0.3 + 0.2 * history.count(0))
    return [p, 1 - p]


def polya(history: tuple[int, ...], labels: int = 3) -> list[float]:
    """Pólya urn θ(a) = (1 + #a) / (|𝒜| + n): depends on the history yet is a martingale."""
    return [(1 + history.count(a)) / (labels + len(history)) for a in range(labels)]


SHORT_TEMPLATE = "{question}\nList {choice_str}:"


@pytest.fixture(scope="session")
def drifting_lm(tmp_path_factory: pytest.TempPathFactory) -> LanguageModel:
    """The tiny test model (seed 7) — with `SHORT_TEMPLATE` its θ depends strongly on the answers written so far
    (the seed-0 model's θ barely does), so Monte Carlo estimates have real variance."""
    return load_model(str(save_tiny_model(tmp_path_factory.mktemp("tiny-model-7"), seed=7)), dtype="float32")


@pytest.fixture(scope="session")
def short_template(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("templates") / "short.txt"
    path.write_text(SHORT_TEMPLATE)
    return str(path)


def runner_for(lm: LanguageModel, template: str) -> QuestionRunner:
    return QuestionRunner(lm, SKY_QUESTION, template)


def fresh_theta(runner: QuestionRunner, answers: Sequence[int]) -> torch.Tensor:
    """θ after prompt + answers from one uncached forward pass with plain SDPA attention (no shared prefix)."""
    tokens = runner.ppr_prompt.tokens
    ids = list(tokens.prompt_ids) + [t for a in answers for t in tokens.answer_ids(a)]
    with torch.no_grad():
        logits = runner.lm.model(torch.tensor([ids]), attn_implementation="sdpa").logits[0, -1]
    return AnswerDist.from_logits(logits, torch.tensor(tokens.label_ids)).probs.double()


def history_blind(model_dir: Path) -> LanguageModel:
    """The tiny model with every attention output projection zeroed: each position sees only its own token, so θ
    after any delimiter (and after the prompt, which ends with the same newline) is one fixed distribution."""
    lm = load_model(str(model_dir), dtype="float32")
    with torch.no_grad():
        for layer in lm.model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
    return lm
