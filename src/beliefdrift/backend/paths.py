"""Batched answer paths on a shared KV cache: prefill a prompt once, fork it to many paths, advance every
path by one answer (label + delimiter) per forward pass, reading the logits of the last position only."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel

from beliefdrift.backend.answer_tokens import AnswerTokens
from beliefdrift.backend.shared_prefix import SharedPrefix, enable_shared_prefix


@dataclass(frozen=True)
class AnswerDist:
    """θ over the answer labels and how much full-vocabulary mass the labels hold.

    probs = softmax(logits[label_ids]);  valid_mass = Σ_labels softmax(logits)[label].
    """

    probs: torch.Tensor  # [..., K]
    valid_mass: torch.Tensor  # [...]

    @classmethod
    def from_logits(cls, logits: torch.Tensor, label_ids: torch.Tensor) -> AnswerDist:
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        label_log_probs = log_probs[..., label_ids]
        return cls(torch.softmax(label_log_probs, dim=-1), label_log_probs.exp().sum(-1))

    def cpu(self) -> AnswerDist:
        """The same distribution on the CPU, where sampling and estimators run."""
        return AnswerDist(self.probs.cpu(), self.valid_mass.cpu())


class PathBatch:
    """B answer paths for one prompt: the prompt's KV cache is stored once and shared, each path caches
    only the answers appended after it. `dist` holds every path's current θ (on the CPU).

    Suffix caches have one common length; a path with a shorter history (e.g. fewer seed answers, after
    `concat`) has `padding[b]` leading slots that its attention skips and its positions discount.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokens: AnswerTokens,
        prefix: SharedPrefix,
        suffix: DynamicCache,
        suffix_length: int,
        dist: AnswerDist,
        padding: torch.Tensor | None = None,
    ):
        self.model = model
        self.tokens = tokens
        self.prefix = prefix
        self.suffix = suffix
        self.suffix_length = suffix_length
        self.dist = dist
        self.padding = torch.zeros(dist.probs.shape[0], dtype=torch.long) if padding is None else padding
        device = next(model.parameters()).device
        self._label_ids = torch.tensor(tokens.label_ids, device=device)
        self._answer_ids = torch.tensor([tokens.answer_ids(i) for i in range(len(tokens.label_ids))], device=device)

    @property
    def size(self) -> int:
        return self.dist.probs.shape[0]

    @classmethod
    @torch.no_grad()
    def prefill(cls, model: PreTrainedModel, tokens: AnswerTokens) -> PathBatch:
        """One path holding the prompt, after a single forward pass over it."""
        enable_shared_prefix(model)
        device = next(model.parameters()).device
        cache = DynamicCache(config=model.config)
        input_ids = torch.tensor([tokens.prompt_ids], device=device)
        logits = model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
        label_ids = torch.tensor(tokens.label_ids, dtype=torch.long, device=device)  # long even when empty
        dist = AnswerDist.from_logits(logits[:, -1], label_ids).cpu()
        return cls(model, tokens, SharedPrefix.from_cache(cache), DynamicCache(config=model.config), 0, dist)

    def select(self, index: torch.Tensor | list[int]) -> PathBatch:
        """A new batch whose path i continues path `index[i]` of this one (fork with repeats, or subset)."""
        index = torch.as_tensor(index, dtype=torch.long)
        suffix = DynamicCache(config=self.model.config)
        if self.suffix_length:
            device = self._label_ids.device
            rows = [(layer.keys[index.to(device)], layer.values[index.to(device)]) for layer in self.suffix.layers]
            suffix = DynamicCache(rows, config=self.model.config)
        dist = AnswerDist(self.dist.probs[index], self.dist.valid_mass[index])
        return PathBatch(self.model, self.tokens, self.prefix, suffix, self.suffix_length, dist, self.padding[index])

    @staticmethod
    def concat(batches: list[PathBatch]) -> PathBatch:
        """One batch holding every path of `batches` (same prompt), shorter suffixes left-padded."""
        first = batches[0]
        if any(b.prefix is not first.prefix for b in batches):
            raise ValueError("only paths forked from the same prefilled prompt can be concatenated")
        length = max(b.suffix_length for b in batches)
        padding = torch.cat([b.padding + (length - b.suffix_length) for b in batches])
        dist = AnswerDist(torch.cat([b.dist.probs for b in batches]), torch.cat([b.dist.valid_mass for b in batches]))
        suffix = DynamicCache(config=first.model.config)
        if length:
            layers = range(len(first.prefix.keys))
            rows = [
                tuple(torch.cat([b._padded(layer, part, length) for b in batches]) for part in (0, 1))
                for layer in layers
            ]
            suffix = DynamicCache(rows, config=first.model.config)
        return PathBatch(first.model, first.tokens, first.prefix, suffix, length, dist, padding)

    def _padded(self, layer: int, part: int, length: int) -> torch.Tensor:
        """This batch's suffix keys (part 0) or values (part 1) of `layer`, left-padded with zeros to `length`."""
        like = self.prefix.keys[layer]
        gap = like.new_zeros(self.size, like.shape[1], length - self.suffix_length, like.shape[3])
        if not self.suffix_length:
            return gap
        cached = self.suffix.layers[layer]
        return torch.cat([gap, cached.keys if part == 0 else cached.values], 2)

    def fork(self, copies: int) -> PathBatch:
        """`copies` paths per existing path (path i becomes paths i·copies … i·copies + copies − 1)."""
        return self.select(torch.arange(self.size).repeat_interleave(copies))

    @torch.no_grad()
    def advance(self, answers: torch.Tensor) -> AnswerDist:
        """Append answers [B, m] (label indices) to every path in one forward pass; return the new θ."""
        answers = answers.reshape(self.size, -1).to(self._answer_ids.device)
        input_ids = self._answer_ids[answers].reshape(self.size, -1)
        device = input_ids.device
        start = self.prefix.length + self.suffix_length - self.padding.to(device)
        positions = start[:, None] + torch.arange(input_ids.shape[1], device=device)
        logits = self.model(
            input_ids=input_ids,
            position_ids=positions,
            past_key_values=self.suffix,
            shared_prefix=self.prefix,
            suffix_padding=self.padding if bool(self.padding.any()) else None,
            use_cache=True,
            logits_to_keep=1,
        ).logits
        self.suffix_length += input_ids.shape[1]
        self.dist = AnswerDist.from_logits(logits[:, -1], self._label_ids).cpu()
        return self.dist
