"""Batched answer paths on a shared KV cache: prefill a prompt once, fork it to many paths, advance every
path by one answer (label + delimiter) per forward pass, reading the logits of the last position only."""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import PreTrainedModel

from beliefdrift.backend.answer_tokens import AnswerTokens
from beliefdrift.backend.model import AnswerDist
from beliefdrift.backend.path_cache import PathCache, concat, prefill


class PathBatch:
    """B answer paths after a prompt (or after several prompts with the same answer tokens, one per question),
    each path caching only its own answers when the model allows it (`backend.path_cache`). `dist` holds every
    path's current θ, on the model's device; `tokens` are the first prompt's (their answer tokens are shared)."""

    def __init__(self, tokens: AnswerTokens, cache: PathCache, dist: AnswerDist, device: torch.device):
        self.tokens = tokens
        self.cache = cache
        self.dist = dist
        self._label_ids = torch.tensor(tokens.label_ids, dtype=torch.long, device=device)  # long even when empty
        self._answer_ids = torch.tensor([tokens.answer_ids(i) for i in range(len(tokens.label_ids))], device=device)

    @property
    def size(self) -> int:
        return self.cache.size

    @classmethod
    @torch.no_grad()
    def prefill(cls, model: PreTrainedModel, tokens: AnswerTokens) -> PathBatch:
        """One path holding the prompt, after a single forward pass over it. A model behind an inference server
        (`backend.served.Endpoint`, not a torch module) gives its own batch with this interface."""
        if not isinstance(model, torch.nn.Module):
            return model.prefill(tokens)
        cache, out = prefill(model, tokens.prompt_ids, logits_to_keep=1)
        device = out.logits.device
        label_ids = torch.tensor(tokens.label_ids, dtype=torch.long, device=device)
        return cls(tokens, cache, AnswerDist.from_logits(out.logits[:, -1], label_ids), device)

    def select(self, index: torch.Tensor | list[int]) -> PathBatch:
        """A new batch whose path i continues path `index[i]` of this one (fork with repeats, or subset)."""
        index = torch.as_tensor(index, dtype=torch.long)
        dist = self.dist.select(index.to(self._label_ids.device))
        return PathBatch(self.tokens, self.cache.select(index), dist, self._label_ids.device)

    @staticmethod
    def concat(batches: list[PathBatch]) -> PathBatch:
        """One batch holding every path of `batches` (of one prompt or of several with the same answer tokens),
        shorter histories left-padded."""
        if not isinstance(batches[0], PathBatch):
            return type(batches[0]).concat(batches)  # served paths (`backend.served.ServedBatch`)
        if any(b._answer_ids.shape != batches[0]._answer_ids.shape or not torch.equal(b._answer_ids,
               batches[0]._answer_ids) for b in batches):
            raise ValueError("only paths with the same answer tokens can share a batch")
        first = batches[0]
        dist = AnswerDist.concat([b.dist for b in batches])
        return PathBatch(first.tokens, concat([b.cache for b in batches]), dist, first._label_ids.device)

    def fork(self, copies: int) -> PathBatch:
        """`copies` paths per existing path (path i becomes paths i·copies … i·copies + copies − 1)."""
        return self.select(torch.arange(self.size).repeat_interleave(copies))

    def reserve(self, answers: int) -> None:
        """Room for `answers` more answers per path in the cache (see `PathCache.reserve`)."""
        self.cache.reserve(answers * self._answer_ids.shape[-1])

    def static_steps(self, answers: int) -> Callable[[torch.Tensor], AnswerDist] | None:
        """`answers` answer passes on the cache's `StaticPasses` (every tensor they touch allocated now; the batch is
        theirs from then on), as a function that writes the token ids of answers [B, 1] (label indices) into the
        passes' input, runs one pass and returns the new θ; None where the cache cannot (the cache per path)."""
        passes = self.cache.static_passes(self._answer_ids.shape[-1], answers)
        if passes is None:
            return None

        @torch.no_grad()
        def advance(answer: torch.Tensor) -> AnswerDist:
            torch.index_select(self._answer_ids, 0, answer[:, 0], out=passes.input_ids)
            logits = passes(logits_to_keep=1).logits
            return AnswerDist.from_logits(logits[:, -1], self._label_ids)

        return advance

    @torch.no_grad()
    def advance(self, answers: torch.Tensor) -> AnswerDist:
        """Append answers [B, m] (label indices) to every path in one forward pass; return the new θ."""
        answers = answers.reshape(self.size, -1).to(self._answer_ids.device)
        input_ids = self._answer_ids[answers].reshape(self.size, -1)
        logits = self.cache.extend(input_ids, logits_to_keep=1).logits
        self.dist = AnswerDist.from_logits(logits[:, -1], self._label_ids)
        return self.dist
