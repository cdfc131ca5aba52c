"""Answer paths and rollouts on a server (`AnswerPaths`, `Rollouts`): each path's or rollout's context as token ids,
its θ or next-token logits fetched from the endpoint for every path at once. The server keeps its own cache."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from beliefdrift.backend.answer_tokens import AnswerTokens
from beliefdrift.backend.model import AnswerDist, EagerPaths
from beliefdrift.backend.served.endpoint import Endpoint, Nucleus


class ServedBatch(EagerPaths):
    """B answer paths on a server (`AnswerPaths`): each path's context (its prompt's ids, then the ids of its
    answers) and θ, fetched for every path at once when first read (`dist`) and after every `advance`."""

    def __init__(self, endpoint: Endpoint, tokens: AnswerTokens, prompts: list[AnswerTokens],
                 contexts: list[tuple[int, ...]], dist: AnswerDist | None = None):
        self.endpoint = endpoint
        self.tokens = tokens
        self.prompts = prompts
        self.contexts = contexts
        self._dist = dist

    @property
    def size(self) -> int:
        return len(self.contexts)

    @property
    def dist(self) -> AnswerDist:
        """Every path's θ: fetched when first read (all paths at once), or as set."""
        if self._dist is None:
            label_ids = self.tokens.label_ids
            self._dist = AnswerDist.from_logprobs(self.endpoint.label_logprobs(self.prompts, self.contexts, label_ids))
        return self._dist

    @dist.setter
    def dist(self, dist: AnswerDist) -> None:
        self._dist = dist

    def select(self, index: torch.Tensor | list[int]) -> ServedBatch:
        index = torch.as_tensor(index, dtype=torch.long).tolist()
        dist = None if self._dist is None else self._dist.select(index)
        return ServedBatch(self.endpoint, self.tokens, [self.prompts[i] for i in index],
                           [self.contexts[i] for i in index], dist)

    @staticmethod
    def concat(batches: Sequence[ServedBatch]) -> ServedBatch:
        first = batches[0]
        if any(b.tokens.label_ids != first.tokens.label_ids or b.tokens.delimiter_ids != first.tokens.delimiter_ids
               for b in batches):
            raise ValueError("only paths with the same answer tokens can share a batch")
        dist = AnswerDist.concat([b.dist for b in batches]) if all(b._dist is not None for b in batches) else None
        return ServedBatch(first.endpoint, first.tokens, [p for b in batches for p in b.prompts],
                           [c for b in batches for c in b.contexts], dist)

    def fork(self, copies: int) -> ServedBatch:
        return self.select(torch.arange(self.size).repeat_interleave(copies))

    def reserve(self, answers: int) -> None:
        """Nothing: the server keeps its own cache."""

    def advance(self, answers: torch.Tensor) -> AnswerDist:
        """Append answers [B, m] (label indices) to every path; the new θ of every path (one request per distinct
        context, all in flight together)."""
        rows = answers.reshape(self.size, -1).tolist()
        self.contexts = [c + tuple(t for a in row for t in self.tokens.answer_ids(a))
                         for c, row in zip(self.contexts, rows, strict=True)]
        self._dist = None
        return self.dist


class ServedRollouts:
    """Rollouts on a server (`Rollouts`): each rollout's context ids; `extend` appends tokens and returns every
    rollout's next-token `nucleus_logits`."""

    def __init__(self, endpoint: Endpoint, contexts: list[tuple[int, ...]]):
        self.endpoint = endpoint
        self.contexts = contexts
        self.size = len(contexts)

    def select(self, index: torch.Tensor) -> ServedRollouts:
        return ServedRollouts(self.endpoint, [self.contexts[i] for i in torch.as_tensor(index).tolist()])

    def reserve(self, tokens: int) -> None:
        """Nothing: the server keeps its own cache."""

    def extend(self, input_ids: torch.Tensor, padding: torch.Tensor | None = None, *, nucleus: Nucleus,
               hidden: bool = False, active: Sequence[int] | None = None) -> tuple[torch.Tensor, None]:
        """Append input_ids [B, T] (the first `padding[b]` of row b are padding, left out) to every rollout; the
        next-token logits [B, vocab] of the rollouts in `active` (all by default), from one request each, for the
        sampler of `nucleus` (temperature, top_p, banned ids; see `nucleus_logits`). The other rows are zeros. No
        hidden states (`ServedModel.hidden_states`)."""
        skip = [0] * self.size if padding is None else padding.tolist()
        self.contexts = [c + tuple(row[s:]) for c, row, s in zip(self.contexts, input_ids.tolist(), skip, strict=True)]
        rows = list(range(self.size)) if active is None else list(active)
        logits = torch.zeros(self.size, len(self.endpoint.tokenizer))
        if rows:
            logits[rows] = self.endpoint.next_logits([self.contexts[r] for r in rows], nucleus)
        return logits, None
