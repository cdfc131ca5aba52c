"""Attention over a prompt shared by many paths, without copying the prompt's keys and values.

Forking a KV cache to J paths copies the prompt's keys/values J times, and every decoding step then
streams J copies through memory (and GQA expands them again). Here the prompt cache is kept once
(batch 1) and each path caches only its own suffix. Attention of the new tokens is one softmax over
[prompt ‖ suffix]: scores against the prompt come from a single matmul shared by every path.

The function is registered with transformers as the attention implementation `SHARED_PREFIX_ATTENTION`;
it falls back to SDPA for ordinary forward passes (no `shared_prefix` keyword).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import AttentionInterface, DynamicCache, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

SHARED_PREFIX_ATTENTION = "beliefdrift_shared_prefix"


@dataclass(frozen=True)
class SharedPrefix:
    """Per-layer keys and values [1, H_kv, P, D] of a prompt, shared by every path."""

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]

    @classmethod
    def from_cache(cls, cache: DynamicCache) -> SharedPrefix:
        return cls(tuple(layer.keys for layer in cache.layers), tuple(layer.values for layer in cache.layers))

    @property
    def length(self) -> int:
        return self.keys[0].shape[-2]


def shared_prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    shared_prefix: SharedPrefix | None = None,
    suffix_padding: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """softmax([q·K_prompt ‖ q·K_suffix] · scale + causal mask on the suffix) · [V_prompt ‖ V_suffix].

    query [B, H, T, D]; key/value [B, H_kv, S, D] are the paths' suffixes (the T new tokens last);
    `suffix_padding[b]` leading suffix slots of path b are padding, hidden from its queries.
    Returns [B, T, H, D] like the other transformers attention functions.
    """
    if shared_prefix is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    prefix_keys = shared_prefix.keys[module.layer_idx][0]  # [H_kv, P, D]
    prefix_values = shared_prefix.values[module.layer_idx][0]
    batch, heads, new, dim = query.shape
    kv_heads, suffix = key.shape[1], key.shape[2]
    group = heads // kv_heads
    scale = scaling if scaling is not None else dim**-0.5
    # Query head h reads kv head h // group (the repeat_kv layout); fold (path, group, token) together.
    grouped = query.reshape(batch, kv_heads, group * new, dim)
    flat = grouped.transpose(0, 1).reshape(kv_heads, batch * group * new, dim)
    prefix_scores = (flat @ prefix_keys.transpose(1, 2)).reshape(kv_heads, batch, group * new, -1).transpose(0, 1)
    suffix_scores = grouped @ key.transpose(2, 3)  # [B, H_kv, g·T, S]
    causal = torch.ones(new, suffix, dtype=torch.bool, device=query.device).tril(suffix - new)
    visible = causal.repeat(group, 1)  # [g·T, S]
    if suffix_padding is not None:
        slots = torch.arange(suffix, device=query.device)
        visible = visible & (slots >= suffix_padding.to(query.device)[:, None])[:, None, None, :]
    suffix_scores = suffix_scores.masked_fill(~visible, float("-inf"))
    weights = torch.softmax(torch.cat([prefix_scores, suffix_scores], -1).float() * scale, -1).to(query.dtype)
    if dropout and module.training:
        weights = torch.nn.functional.dropout(weights, p=dropout)
    prompt_len = prefix_keys.shape[1]
    prefix_weights = weights[..., :prompt_len].transpose(0, 1).reshape(kv_heads, batch * group * new, prompt_len)
    out = (prefix_weights @ prefix_values).reshape(kv_heads, batch, group * new, dim).transpose(0, 1)
    out = out + weights[..., prompt_len:] @ value
    return out.reshape(batch, heads, new, dim).transpose(1, 2).contiguous(), None


AttentionInterface.register(SHARED_PREFIX_ATTENTION, shared_prefix_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(SHARED_PREFIX_ATTENTION, sdpa_mask)


def enable_shared_prefix(model: PreTrainedModel) -> None:
    """Route the model's attention through `shared_prefix_attention` (SDPA unless a prefix is passed)."""
    if model.config._attn_implementation != SHARED_PREFIX_ATTENTION:
        model.set_attn_implementation(SHARED_PREFIX_ATTENTION)
