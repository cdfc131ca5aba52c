"""A local model's answer paths and rollouts on its path caches (`backend.path_cache`): prefill a prompt once, fork
it to many paths, advance every path by one answer (label + delimiter), or every rollout by one token, per forward
pass, reading the logits of the last position only."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from beliefdrift.backend.answer_tokens import AnswerTokens
from beliefdrift.backend.model import EAGER, AnswerDist, StepMode
from beliefdrift.backend.path_cache import Forward, PathCache, concat, prefill
from beliefdrift.backend.wrappers import transformers_model


class PathBatch:
    """B answer paths after a prompt (or after several prompts with the same answer tokens, one per question),
    each path caching only its own answers when the model allows it (`backend.path_cache`): the `AnswerPaths` of a
    local model. `dist` holds every path's current θ, on the model's device; `tokens` are the first prompt's (their
    answer tokens are shared); `answer_step` is how the model runs their answer steps (`EngineSettings`)."""

    def __init__(self, tokens: AnswerTokens, cache: PathCache, dist: AnswerDist, device: torch.device,
                 answer_step: StepMode = EAGER):
        self.tokens = tokens
        self.cache = cache
        self.dist = dist
        self.answer_step = answer_step
        self._label_ids = torch.tensor(tokens.label_ids, dtype=torch.long, device=device)  # long even when empty
        self._answer_ids = torch.tensor([tokens.answer_ids(i) for i in range(len(tokens.label_ids))], device=device)

    @property
    def size(self) -> int:
        return self.cache.size

    @classmethod
    @torch.no_grad()
    def prefill(cls, model: torch.nn.Module, tokens: AnswerTokens, forward: Forward | None = None,
                answer_step: StepMode = EAGER) -> PathBatch:
        """One path holding the prompt, after a single forward pass over it (run by `forward`, `model` itself by
        default)."""
        cache, out = prefill(model, tokens.prompt_ids, forward, logits_to_keep=1)
        device = out.logits.device
        label_ids = torch.tensor(tokens.label_ids, dtype=torch.long, device=device)
        return cls(tokens, cache, AnswerDist.from_logits(out.logits[:, -1], label_ids), device, answer_step)

    def select(self, index: torch.Tensor | list[int]) -> PathBatch:
        """A new batch whose path i continues path `index[i]` of this one (fork with repeats, or subset)."""
        index = torch.as_tensor(index, dtype=torch.long)
        dist = self.dist.select(index.to(self._label_ids.device))
        return PathBatch(self.tokens, self.cache.select(index), dist, self._label_ids.device, self.answer_step)

    @staticmethod
    def concat(batches: Sequence[PathBatch]) -> PathBatch:
        """One batch holding every path of `batches` (of one prompt or of several with the same answer tokens),
        shorter histories left-padded."""
        if any(b._answer_ids.shape != batches[0]._answer_ids.shape or not torch.equal(b._answer_ids,
               batches[0]._answer_ids) for b in batches):
            raise ValueError("only paths with the same answer tokens can share a batch")
        first = batches[0]
        dist = AnswerDist.concat([b.dist for b in batches])
        return PathBatch(first.tokens, concat([b.cache for b in batches]), dist, first._label_ids.device,
                         first.answer_step)

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


class CacheRollouts:
    """Chain-of-thought rollouts on a local model's path cache (`Rollouts`, `StaticRollouts`): every rollout's keys and
    values of the prompt shared, each its own suffix; `decode_step` is how the model runs their decoding steps
    (`EngineSettings`)."""

    def __init__(self, cache: PathCache, decode_step: StepMode = EAGER):
        self.cache = cache
        self.decode_step = decode_step

    @property
    def size(self) -> int:
        return self.cache.size

    @property
    def hidden_size(self) -> int:
        """The input size of the model's output layer: the size of the last hidden state."""
        return transformers_model(self.cache.model).get_output_embeddings().weight.shape[-1]

    def select(self, index: torch.Tensor) -> CacheRollouts:
        return CacheRollouts(self.cache.select(index), self.decode_step)

    def reserve(self, tokens: int) -> None:
        self.cache.reserve(tokens)

    def extend(self, input_ids: torch.Tensor, padding: torch.Tensor | None = None, *,
               nucleus: tuple[float, float, Sequence[int]], hidden: bool = False,
               active: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One forward pass of every rollout (`nucleus` and `active` aside: the full logits of every row are there)."""
        out = self.cache.extend(input_ids, padding, logits_to_keep=1, output_hidden_states=hidden)
        return out.logits[:, -1], (out.hidden_states[-1][:, -1] if hidden else None)

    def static_steps(self, tokens: int, hidden: bool) -> Callable[[torch.Tensor], tuple[torch.Tensor,
                                                                                        torch.Tensor | None]] | None:
        """`tokens` passes of one token per rollout on the cache's `StaticPasses` (every tensor they touch allocated
        now; the rollouts are theirs from then on), as a function that writes token ids [B] into the passes' input,
        runs one pass and returns its next-token logits [B, vocab] and, with `hidden`, last hidden states [B, H];
        None where the cache cannot (the cache per path)."""
        passes = self.cache.static_passes(1, tokens)
        if passes is None:
            return None

        @torch.no_grad()
        def advance(token: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
            passes.input_ids.copy_(token[:, None])
            out = passes(logits_to_keep=1, output_hidden_states=hidden)
            return out.logits[:, -1], (out.hidden_states[-1][:, -1] if hidden else None)

        return advance
