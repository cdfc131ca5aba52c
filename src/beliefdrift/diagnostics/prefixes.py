"""Answer prefixes a_{1:n} at which martingale drift is measured.

- Top-K prefixes of a length n (for EMD‾): the K most likely answer lists under the process,
  score(a_{1:n}) = Σ_t log θ_{t−1}(a_t). Found by beam search (width ≥ K, one forward pass per level), then made
  exact: scores only decrease as a prefix grows, so a node the beam dropped can only lead to a better result than
  the K-th found if its own score is higher; those nodes are re-expanded (best first) until none is left.
- Burn-in prefixes (for EMD_k(b)): a_{1:b} sampled from the process itself, b = 0 … B.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from beliefdrift.diagnostics.kstep import BATCH_BUDGET, AnswerProcess
from beliefdrift.engine.resampling import draw_labels


@dataclass(frozen=True)
class Prefix:
    """An answer list (label indices) and its log-probability Σ_t log θ_{t−1}(a_t) under the process."""

    answers: tuple[int, ...]
    log_prob: float


@dataclass(frozen=True)
class TopPrefixes:
    """The most likely prefixes of one length, best first; `exact` is False only when the search budget ran out
    before the beam's result was proven (then the list is beam search's answer)."""

    prefixes: list[Prefix]
    exact: bool


def _children(process: AnswerProcess, nodes: list[Prefix]) -> list[Prefix]:
    """All one-answer extensions of `nodes` (scored with θ after each node); nodes share a length."""
    probs = process.dist.probs.double().log().cpu()
    return [
        Prefix((*node.answers, a), node.log_prob + float(probs[i, a]))
        for i, node in enumerate(nodes)
        for a in range(probs.shape[1])
    ]


def _ranked(prefixes: list[Prefix]) -> list[Prefix]:
    """Best first; ties broken by the answers, so results do not depend on expansion order."""
    return sorted(prefixes, key=lambda p: (-p.log_prob, p.answers))


def _at(root: AnswerProcess, nodes: list[Prefix]) -> AnswerProcess:
    """Paths for `nodes` (same length ≥ 1) continuing the single path `root`, in one forward pass."""
    batch = root.select([0] * len(nodes))
    batch.advance(torch.tensor([node.answers for node in nodes]))
    return batch


def top_prefixes(
    root: AnswerProcess,
    length: int,
    k: int,
    beam_width: int | None = None,
    max_expansions: int = 4096,
    budget: int = BATCH_BUDGET,
) -> TopPrefixes:
    """The `k` most likely prefixes of `length` answers after the single path `root` (which is not advanced).

    Beam search of width `beam_width` (default k), then the exactness repair described in the module docstring,
    expanding at most `max_expansions` dropped nodes (`budget` per forward pass).
    """
    if root.size != 1:
        raise ValueError(f"top_prefixes needs a single root path, got {root.size}")
    width = max(k, beam_width or k)
    beam, nodes = root, [Prefix((), 0.0)]
    dropped: list[Prefix] = []
    for depth in range(1, length + 1):
        candidates = _ranked(_children(beam, nodes))
        if depth == length:
            nodes = candidates
            break
        row = {node.answers: i for i, node in enumerate(nodes)}
        nodes, dropped = candidates[:width], dropped + candidates[width:]
        beam = beam.select([row[node.answers[:-1]] for node in nodes])
        beam.advance(torch.tensor([[node.answers[-1]] for node in nodes]))
    best = nodes[:k]
    expansions = 0
    while True:
        threshold = best[-1].log_prob if len(best) == k else -float("inf")
        dropped = _ranked([node for node in dropped if node.log_prob > threshold])
        if not dropped:
            return TopPrefixes(best, exact=True)
        if expansions >= max_expansions:
            return TopPrefixes(best, exact=False)
        wave, dropped = dropped[:budget], dropped[budget:]
        expansions += len(wave)
        for depth in sorted({len(node.answers) for node in wave}):
            group = [node for node in wave if len(node.answers) == depth]
            children = _children(_at(root, group), group)
            if depth + 1 == length:
                best = _ranked(best + children)[:k]
            else:
                dropped += children


def pick_prefix(top: TopPrefixes, generator: torch.Generator) -> Prefix:
    """One of the top prefixes, uniformly with the run's generator."""
    return top.prefixes[int(torch.randint(len(top.prefixes), (1,), generator=generator))]


def burn_in_prefixes(
    root: AnswerProcess, max_length: int, generator: torch.Generator
) -> Iterator[tuple[int, AnswerProcess, torch.Tensor]]:
    """(b, paths, answers[P, b]) for b = 0 … `max_length`: every path of `root` extended by answers sampled from
    its own θ, one step at a time. `root` is not advanced; do not advance the yielded paths either."""
    batch = root.select(torch.arange(root.size))
    answers = torch.empty(root.size, 0, dtype=torch.long)
    for b in range(max_length + 1):
        yield b, batch, answers
        if b < max_length:
            step = draw_labels(batch.dist.probs, 1, generator).cpu()
            batch.advance(step)
            answers = torch.cat([answers, step], 1)
