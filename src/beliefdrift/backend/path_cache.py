"""Caches for many paths continuing one prompt: prefill once, fork, concatenate, extend every path per pass.

`SharedPrefixCache` keeps the prompt's keys and values once and each path's own suffix (`shared_prefix`);
`PerPathCache` is the fallback for models the shared prefix cannot serve: every path holds its whole left-padded
token sequence and runs as an ordinary padded batch, re-encoded after a fork or a concatenation (slower, and
correct for any model transformers can run with left padding). `prefill` picks the right one per model.
Both return the model's output for the tokens they append, so callers read logits and hidden states alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from transformers import DynamicCache

from beliefdrift.backend.kv_cache import cache_argument, full_cache, is_static, reserve_room, static_cache
from beliefdrift.backend.shared_prefix import AttentionPass, PromptRuns, SharedPrefix, enable_shared_prefix, no_mask
from beliefdrift.backend.wrappers import input_device, transformers_model, unwrapped

#: What runs a forward pass of the model: the module itself, or its forward compiled (`local.TransformersModel`).
Forward = Callable[..., Any]


class PathCache(Protocol):
    """A batch of paths after one prompt: `size` paths of `model`, extended together by `extend`, each pass run by
    `forward`."""

    model: torch.nn.Module
    forward: Forward
    size: int

    def extend(self, input_ids: torch.Tensor, padding: torch.Tensor | None = None, **model_kwargs: Any) -> Any:
        """Append input_ids [B, T] to every path in one forward pass (the first `padding[b]` of row b are padding,
        never attended to); the model's output for those T tokens."""

    def select(self, index: torch.Tensor) -> PathCache:
        """A new cache whose path i continues path `index[i]` of this one."""

    def reserve(self, tokens: int) -> None:
        """Room for `tokens` more tokens per path, so that the next extends up to them allocate no cache memory
        (a hint: extending further still works)."""

    def static_passes(self, new: int, passes: int) -> StaticPasses | None:
        """`passes` passes of `new` tokens per path with every tensor they touch allocated now (`StaticPasses`; the
        cache is theirs from then on), or None where the cache cannot run them."""

    @staticmethod
    def concat(caches: Sequence[Any]) -> PathCache:
        """One cache holding every path of `caches` (all of this kind), shorter histories left-padded."""


def shares_prefix(model: torch.nn.Module) -> bool:
    """Whether the engine serves `model` (or the model inside a DDP/peft wrapper) with one shared prompt cache."""
    return enable_shared_prefix(transformers_model(model))


def prefill(model: torch.nn.Module, prompt_ids: Sequence[int], forward: Forward | None = None,
            **model_kwargs: Any) -> tuple[PathCache, Any]:
    """One path holding the prompt after a single forward pass over it (run by `forward`, the model itself by
    default), and that pass's output (gradients flow when grad mode is on)."""
    base = unwrapped(model)
    shared = shares_prefix(model)
    forward = forward or model
    input_ids = torch.tensor([list(prompt_ids)], device=input_device(model))
    cache = full_cache() if shared else DynamicCache(config=base.config)
    out = forward(input_ids=input_ids, **cache_argument(model, cache), use_cache=True, **model_kwargs)
    if shared:
        return SharedPrefixCache(model, forward, [SharedPrefix.from_cache(cache)]), out
    return PerPathCache(model, forward, input_ids, torch.ones_like(input_ids), cache), out


def concat(caches: Sequence[PathCache]) -> PathCache:
    """One cache holding every path of `caches` (of one prompt or several), shorter histories left-padded."""
    kind = type(caches[0])
    if any(type(c) is not kind for c in caches):
        raise ValueError("cannot concatenate caches of different kinds")
    return kind.concat(caches)


class SharedPrefixCache:
    """Each prompt's keys/values once, each path's suffix on its own. `prompts[b]` is the prompt path b continues
    (several questions can share one batch); `padding[b]` leading suffix slots of path b are padding (hidden from
    its attention and not counted in its positions)."""

    def __init__(
        self,
        model: torch.nn.Module,
        forward: Forward,
        prompts: Sequence[SharedPrefix],
        suffix: DynamicCache | None = None,
        suffix_length: int = 0,
        padding: torch.Tensor | None = None,
    ):
        self.model = model
        self.forward = forward
        self.prompts = list(prompts)
        self.size = len(self.prompts)
        self.suffix = suffix if suffix is not None else self._empty_suffix()
        self.suffix_length = suffix_length
        self.device = self.prompts[0].keys[0].device
        self.padding = padding  # [B] on the device, or None when no path is padded
        self.runs = PromptRuns.of(self.prompts)
        self._no_mask = no_mask(self.device)
        self._cache_keyword = next(iter(cache_argument(model, None)))
        self._start: int | torch.Tensor = self.prompts[0].length  # each path's first suffix position
        if len(self.runs.runs) > 1:
            self._start = torch.tensor([p.length for p in self.prompts], device=self.device)[:, None]

    def extend(self, input_ids: torch.Tensor, padding: torch.Tensor | None = None, **model_kwargs: Any) -> Any:
        if is_static(self.suffix):
            raise ValueError("this cache belongs to its static passes (static_passes) and cannot be extended eagerly")
        new = input_ids.shape[1]
        if padding is not None:
            if self.suffix_length:
                raise ValueError("ragged (padded) input only on paths with an empty suffix")
            self.padding = padding.to(self.device)
        out = self._forward(input_ids.to(self.device), self._positions(new), **model_kwargs)
        self.suffix_length += new
        return out

    def reserve(self, tokens: int) -> None:
        """Room for `tokens` more tokens per path in the growing suffix."""
        reserve_room(self.suffix, self.suffix_length + tokens)

    def static_passes(self, new: int, passes: int) -> StaticPasses:
        return StaticPasses(self, new, passes)

    def _positions(self, new: int) -> torch.Tensor:
        """The absolute positions [B, new] of `new` tokens appended to every path."""
        positions = self._start + self.suffix_length + torch.arange(new, device=self.device).expand(self.size, -1)
        if self.padding is not None:
            positions = (positions - self.padding[:, None]).clamp(min=0)  # clamped: padding slots only
        return positions

    def _forward(self, input_ids: torch.Tensor, positions: torch.Tensor, suffix_end: torch.Tensor | None = None,
                 **model_kwargs: Any) -> Any:
        """One forward pass of input_ids [B, T] at `positions` over the shared prompts and the suffix cache, which
        it appends to (`suffix_end`: see `AttentionPass`). The empty 4D mask keeps transformers from building masks
        the shared-prefix attention never reads."""
        return self.forward(
            input_ids=input_ids,
            attention_mask=self._no_mask,
            position_ids=positions,
            **{self._cache_keyword: self.suffix},
            shared_prefix=self.runs,
            suffix_padding=self.padding,
            attention_pass=AttentionPass(suffix_end),
            use_cache=True,
            **model_kwargs,
        )

    def select(self, index: torch.Tensor) -> SharedPrefixCache:
        index = torch.as_tensor(index, dtype=torch.long)
        prompts = [self.prompts[i] for i in index.tolist()]
        index = index.to(self.device)
        suffix = None
        if self.suffix_length:
            suffix = full_cache([tuple(t[index] for t in self._filled(layer)) for layer in self.suffix.layers])
        padding = self.padding[index] if self.padding is not None else None
        return SharedPrefixCache(self.model, self.forward, prompts, suffix, self.suffix_length, padding)

    @staticmethod
    def concat(caches: Sequence[SharedPrefixCache]) -> SharedPrefixCache:
        first = caches[0]
        length = max(c.suffix_length for c in caches)
        padding = None
        if any(c.padding is not None or c.suffix_length < length for c in caches):
            padding = torch.cat([c._padding() + (length - c.suffix_length) for c in caches])
        suffix = None
        if length:
            rows = [
                tuple(torch.cat([c._padded(layer, part, length) for c in caches]) for part in (0, 1))
                for layer in range(len(first.prompts[0].keys))
            ]
            suffix = full_cache(rows)
        return SharedPrefixCache(first.model, first.forward, [p for c in caches for p in c.prompts], suffix, length,
                                 padding)

    def _empty_suffix(self) -> DynamicCache:
        """A suffix cache with no tokens whose layers and buffers exist before the first pass: a pass that made them
        would, under torch.compile, be a graph of its own for each range of token counts."""
        return full_cache([(k.new_empty(self.size, k.shape[1], 0, k.shape[3]),) * 2 for k in self.prompts[0].keys])

    def _padding(self) -> torch.Tensor:
        if self.padding is None:
            return torch.zeros(self.size, dtype=torch.long, device=self.device)
        return self.padding

    def _padded(self, layer: int, part: int, length: int) -> torch.Tensor:
        """This cache's suffix keys (part 0) or values (part 1) of `layer`, left-padded with zeros to `length`."""
        like = self.prompts[0].keys[layer]
        gap = like.new_zeros(self.size, like.shape[1], length - self.suffix_length, like.shape[3])
        if not self.suffix_length:
            return gap
        return torch.cat([gap, self._filled(self.suffix.layers[layer])[part]], 2)

    def _filled(self, layer: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values of a suffix cache layer's filled slots."""
        if is_static(self.suffix):  # its fill count lives on the device, advanced by the static passes alone
            raise ValueError("this cache belongs to its static passes (static_passes): its suffix cannot be read back")
        return layer.keys[..., : self.suffix_length, :], layer.values[..., : self.suffix_length, :]


class StaticPasses:
    """`passes` forward passes of `new` tokens per path on a `SharedPrefixCache`, with every tensor they read or write
    allocated once, here: the token ids `input_ids` [B, new] (the caller writes each pass's into it), their positions
    [B, new] (advanced in place after each pass), the suffix as a `static_cache` with room for every pass (its count of
    filled slots kept on the device and advanced in place by its own update, `AttentionPass.suffix_end`); the
    prompts' keys and values are read where they are. A pass reads no Python value that changes from one pass to the
    next, so one recorded pass (a CUDA graph) replays them all. The cache is theirs from then on: it cannot be extended
    eagerly.

    θ equals the growing suffix's up to rounding: the attention also reads the empty slots, with weight zero."""

    def __init__(self, cache: SharedPrefixCache, new: int, passes: int):
        self.cache = cache
        self.new = new
        self.input_ids = torch.zeros(cache.size, new, dtype=torch.long, device=cache.device)
        self.positions = cache._positions(new).contiguous()
        rows = [cache._filled(layer) for layer in cache.suffix.layers]
        cache.suffix = static_cache(rows, cache.suffix_length + new * passes)
        self._suffix_end = cache.suffix.layers[0].cumulative_length

    def __call__(self, **model_kwargs: Any) -> Any:
        """One pass over `input_ids`: the model's output for its tokens."""
        out = self.cache._forward(self.input_ids, self.positions, self._suffix_end, **model_kwargs)
        self.positions += self.new
        return out


class PerPathCache:
    """Every path's whole token sequence, left-padded (`mask` 0 on padding), with the model's own KV cache of
    it, or None after a fork or concatenation, when the next `extend` re-encodes the sequences first."""

    def __init__(self, model: torch.nn.Module, forward: Forward, ids: torch.Tensor, mask: torch.Tensor,
                 cache: Any | None = None):
        self.model = model
        self.forward = forward
        self.ids = ids
        self.mask = mask
        self.cache = cache
        self.size = ids.shape[0]

    def extend(self, input_ids: torch.Tensor, padding: torch.Tensor | None = None, **model_kwargs: Any) -> Any:
        input_ids = input_ids.to(self.ids.device)
        new = input_ids.shape[1]
        ids = torch.cat([self.ids, input_ids], 1)
        mask = torch.cat([self.mask, torch.ones_like(input_ids)], 1)
        if padding is not None:
            mask[:, -new:] = (torch.arange(new, device=ids.device) >= padding.to(ids.device)[:, None]).long()
            # Padding goes first in every row (sliding windows count slots), so the sequences are re-encoded.
            order = torch.sort(mask, dim=1, stable=True).indices
            ids, mask, self.cache = ids.gather(1, order), mask.gather(1, order), None
        old = 0 if self.cache is None else self.ids.shape[1]
        if self.cache is None:
            self.cache = DynamicCache(config=unwrapped(self.model).config)
        keep = model_kwargs.pop("logits_to_keep", 0)
        if isinstance(keep, torch.Tensor):
            keep = keep + (ids.shape[1] - new)  # positions within the re-encoded sequence
        out = self.forward(
            input_ids=ids[:, old:],
            attention_mask=mask,
            position_ids=(mask.cumsum(-1) - 1).clamp(min=0)[:, old:],
            **cache_argument(self.model, self.cache),
            use_cache=True,
            logits_to_keep=keep,
            **model_kwargs,
        )
        if getattr(out, "hidden_states", None) is not None:
            out.hidden_states = tuple(h[:, -new:] for h in out.hidden_states)
        if isinstance(keep, int) and keep == 0:
            out.logits = out.logits[:, -new:]
        self.ids, self.mask = ids, mask
        return out

    def reserve(self, tokens: int) -> None:
        """Nothing: the model's own cache grows by concatenation (this is the slow, always-correct fallback)."""

    def static_passes(self, new: int, passes: int) -> None:
        """None: transformers' own masks and caches, which this fallback runs on, read the fill count on the host."""

    def select(self, index: torch.Tensor) -> PerPathCache:
        index = torch.as_tensor(index, dtype=torch.long).to(self.ids.device)
        return PerPathCache(self.model, self.forward, self.ids[index], self.mask[index])

    @staticmethod
    def concat(caches: Sequence[PerPathCache]) -> PerPathCache:
        length = max(c.ids.shape[1] for c in caches)

        def left_pad(t: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.pad(t, (length - t.shape[1], 0))

        ids = torch.cat([left_pad(c.ids) for c in caches])
        return PerPathCache(caches[0].model, caches[0].forward, ids, torch.cat([left_pad(c.mask) for c in caches]))
