"""The KV caches the engine hands a transformers model, in one place: a growing cache with room reserved in advance
(`full_cache`, `GrowingLayer`), a static one allocated once (`static_cache`, what CUDA graphs need), one written
once per forward pass (`one_pass_cache`, the SC loss's under gradient checkpointing), and the keyword a model's
forward pass takes one by (`cache_argument`). The path caches built on them are `backend.path_cache`'s."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import Cache, DynamicCache
from transformers.cache_utils import DynamicLayer, StaticLayer

from beliefdrift.backend.wrappers import transformers_model


def cache_argument(model: torch.nn.Module, cache: Any) -> dict[str, Any]:
    """The keyword argument that hands a KV cache to `model`'s forward pass: `cache` where transformers has renamed
    `past_key_values` (the old name warns, and goes in 5.40), `past_key_values` in older versions and in models that
    bring their own code."""
    return {_cache_keyword(type(transformers_model(model)).forward): cache}


@functools.cache
def _cache_keyword(forward: Callable[..., Any]) -> str:
    """The keyword by which `forward` (a model class's, unbound; its signature read once) takes the KV cache."""
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


class GrowingLayer(DynamicLayer):
    """A full cache layer with spare room: appended keys/values are written in place into buffers of at least
    `room` positions (`reserve`), whose length doubles when full, so a decoding step copies only its new tokens
    instead of the whole cache, and none once the room for a run is reserved. `keys` and `values` are views of the
    filled part, with the same values `DynamicLayer` would hold. A forward pass reads only the buffers and the
    `filled` count, never those views (under `torch.compile` a view and its buffer would be two aliased inputs)."""

    def __init__(self) -> None:
        super().__init__()
        self.filled = 0
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self.filled, self.filled + key_states.shape[-2]
        buffers = self._buffers
        if buffers is None or end >= buffers[0].shape[-2]:
            buffers = self._grow(key_states, value_states, max(2 * end, 16))
        buffers[0][..., start:end, :].copy_(key_states)
        buffers[1][..., start:end, :].copy_(value_states)
        self.filled = end
        self.keys, self.values = (buffer[..., :end, :] for buffer in buffers)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.filled

    def reserve(self, room: int) -> None:
        """Room for `room` positions in all (the filled ones included), allocated now."""
        if self._buffers is not None and self._buffers[0].shape[-2] <= room:
            self._grow(*self._buffers, room)

    def _grow(self, keys: torch.Tensor, values: torch.Tensor, room: int) -> tuple[torch.Tensor, torch.Tensor]:
        """New buffers of `room` positions and one spare (a pass that fills its buffer exactly would be a graph of
        its own under torch.compile), shaped like `keys`/`values`, holding the filled part of the old ones; kept and
        returned."""
        buffers = (keys.new_empty(*keys.shape[:-2], room + 1, keys.shape[-1]),
                   values.new_empty(*values.shape[:-2], room + 1, values.shape[-1]))
        if self.filled and self._buffers is not None:
            for new, old in zip(buffers, self._buffers, strict=True):
                new[..., : self.filled, :].copy_(old[..., : self.filled, :])
        self._buffers = buffers
        return buffers


def full_cache(rows: Sequence[tuple[torch.Tensor, torch.Tensor]] = ()) -> DynamicCache:
    """A cache that keeps every position on every layer (no sliding-window truncation) and appends in place
    (`GrowingLayer`), holding `rows[i]` = (keys, values) of layer i to start with."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = GrowingLayer
    for layer, (keys, values) in enumerate(rows):
        cache.update(keys, values, layer)
    return cache


def reserve_room(cache: DynamicCache, room: int) -> None:
    """Room for `room` positions in every layer a `full_cache` holds."""
    for layer in cache.layers:
        layer.reserve(room)


def static_cache(rows: Sequence[tuple[torch.Tensor, torch.Tensor]], room: int) -> Cache:
    """A cache of `room` positions per layer, allocated once and zero-filled (transformers' `StaticLayer`: written in
    place at a position it keeps on the device, read whole), holding `rows[i]` = (keys, values) of layer i to start
    with. Every pass sees tensors of the same shapes at the same addresses, as CUDA graphs need; the attention hides
    the slots past a pass's new tokens (`AttentionPass.suffix_end`)."""
    cache = Cache(layers=[StaticLayer(room) for _ in rows])
    for layer, (keys, values) in zip(cache.layers, rows, strict=True):
        layer.update(keys, values)
    return cache


def is_static(cache: object) -> bool:
    """Whether `cache` is a `static_cache` (its layers allocated once, written in place)."""
    return isinstance(cache, Cache) and bool(cache.layers) and isinstance(cache.layers[0], StaticLayer)


class OnePassLayer(DynamicLayer):
    """A full cache layer written once per forward pass: a repeated write starts the layer afresh instead of
    appending to it (the layer's recompute under gradient checkpointing must see what the forward pass saw)."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, ...]:
        self.is_initialized = False  # the parent then re-initialises the layer empty and appends to it
        return super().update(key_states, value_states, *args, **kwargs)


def one_pass_cache() -> DynamicCache:
    """An empty KV cache for one forward pass from position 0 (see `OnePassLayer`)."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = OnePassLayer
    return cache
