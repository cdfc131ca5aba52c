"""Attention over a prompt shared by many paths, without copying the prompt's keys and values.

Forking a KV cache to J paths copies the prompt's keys/values J times, and every decoding step then
streams J copies through memory (and GQA expands them again). Here the prompt cache is kept once
(batch 1) and each path caches only its own suffix. Attention of the new tokens is one softmax over
[prompt ‖ suffix]: scores against the prompt come from a single matmul shared by every path (off the CPU, from
the device's fused attention kernel, which joins the suffix's softmax by its log-sum-exp). Sliding-window
layers (Mistral, Phi-3, Qwen2/3, Gemma-2/3 local layers, OLMo-3) and attention-logit soft-capping (Gemma-2)
are applied exactly as the models' own attention does, with absolute positions per path.

`enable_shared_prefix` registers a dispatcher as the model's attention implementation: a forward pass that
carries a `shared_prefix` keyword (the engine's) runs `shared_prefix_attention`; every other forward pass
runs the implementation the model was loaded with (sdpa, eager, flash_attention_2, …), unchanged.
Models the shared prefix cannot serve (attention that bypasses transformers' attention interface, linear or
chunked attention layers, attention sinks, KV sharing between layers) are reported by
`shared_prefix_support`; the engine then keeps a full cache per path (`backend.path_cache`).
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import transformers
from transformers import AttentionInterface, DynamicCache, PreTrainedModel
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from beliefdrift.backend import compat
from beliefdrift.backend.kv_cache import cache_argument, full_cache
from beliefdrift.errors import first_line

log = logging.getLogger(__name__)

SHARED_PREFIX_ATTENTION = "beliefdrift_shared_prefix"
# Attention implementations the dispatcher can wrap, by the short tag of its registered name (the tag keeps
# transformers from reading "flash" into our name).
BASE_IMPLEMENTATIONS = {
    "sdpa": "sdpa",
    "eager": "eager",
    "fa2": "flash_attention_2",
    "fa3": "flash_attention_3",
    "flex": "flex_attention",
}
SERVED_LAYER_TYPES = {"full_attention", "sliding_attention"}
#: A transformers attention function: (module, query, key, value, mask, **options) -> (output, weights or None).
AttentionFunction = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]


@dataclass(frozen=True)
class SharedPrefix:
    """Per-layer keys and values [1, H_kv, P, D] of a prompt, shared by every path (every layer holds all P
    positions: sliding-window layers are masked at attention time, never truncated)."""

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]

    @classmethod
    def from_cache(cls, cache: DynamicCache) -> SharedPrefix:
        lengths = {layer.keys.shape[-2] for layer in cache.layers}
        if len(lengths) != 1:
            raise ValueError(f"a shared prefix needs every layer's full cache; got lengths {sorted(lengths)}")
        # Copied out of the cache's spare room: the prompt's keys are read by every path at every step.
        return cls(tuple(layer.keys.contiguous() for layer in cache.layers),
                   tuple(layer.values.contiguous() for layer in cache.layers))

    @property
    def length(self) -> int:
        return self.keys[0].shape[-2]


@dataclass(frozen=True)
class PromptRuns:
    """The prompts of a batch of paths: `runs[i] = (prefix, count)` says the next `count` paths continue `prefix`
    (several questions in one batch). Each run is attended to exactly as if it were alone, one run after another,
    unless `stack`: then runs of equal size attend to their prompts stacked and zero-padded to the longest (rounded
    up to a multiple of 16), in one batched product per layer (fewer, larger kernels for a GPU; equal to the
    run-by-run result up to rounding). Stacked prompts are attended to by the device's fused attention kernel where
    a layer allows it and `fused` (`fused_attention_works`): their scores are then never written out."""

    runs: tuple[tuple[SharedPrefix, int], ...]
    stack: bool = False
    fused: bool = True
    # Built with the batch, outside any forward pass (a compiled pass would otherwise be one graph while the memo is
    # empty and another once it is full).
    _stacked: tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], ...] = field(
        init=False, default=(), compare=False, repr=False
    )
    _key_biases: tuple[torch.Tensor | None, ...] = field(init=False, default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.stackable:
            return
        object.__setattr__(self, "_stacked", tuple(map(self._stack, range(len(self.runs[0][0].keys)))))
        if self.fused:
            # A bias, and a check of the kernel, per device (a device map spreads the layers over several), dtype
            # and head size, shared by the layers alike in those.
            kinds = [(keys.device, keys.dtype, keys.shape[-1]) for keys, _, _ in self._stacked]
            biases: dict[tuple, torch.Tensor | None] = {}
            lengths = [prefix.length for prefix, _ in self.runs]
            for kind, (keys, _, _) in zip(kinds, self._stacked, strict=True):
                if kind not in biases:
                    works = fused_attention_works(*kind)
                    biases[kind] = _padding_bias(lengths, keys.shape[2], keys.dtype, keys.device) if works else None
            object.__setattr__(self, "_key_biases", tuple(biases[kind] for kind in kinds))

    @classmethod
    def of(cls, prompts: Sequence[SharedPrefix]) -> PromptRuns:
        """The runs of `prompts[b]`, the prompt path b continues. Off the CPU equal runs (one question's too) attend
        in one stacked product, the prompts by a fused kernel (fewer kernels, no scores written out); on the CPU run by
        run, which keeps a batch of questions bit-identical to one question at a time."""
        runs: list[list] = []
        for prompt in prompts:
            if runs and runs[-1][0] is prompt:
                runs[-1][1] += 1
            else:
                runs.append([prompt, 1])
        return cls(tuple((prompt, count) for prompt, count in runs), stack=prompts[0].keys[0].device.type != "cpu")

    @property
    def stackable(self) -> bool:
        return self.stack and len({count for _, count in self.runs}) == 1

    def key_bias(self, layer: int) -> torch.Tensor | None:
        """0 for the stacked prompts' keys of `layer` and −∞ for their zero padding [R, 1, 1, W], on the layer's
        device in its keys' dtype; None where the fused kernel does not serve the layer."""
        return self._key_biases[layer] if self._key_biases else None

    def stacked(self, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The runs' prompt keys and values of `layer` [R, H_kv, W, D] (zeros past each prompt) and every
        path's prompt length [B]."""
        return self._stacked[layer]

    def _stack(self, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        prefixes = [prefix for prefix, _ in self.runs]
        width = -(-max(p.length for p in prefixes) // 16) * 16  # aligned rows for the fused kernel's key bias
        like = prefixes[0].keys[layer]
        keys, values = (like.new_zeros(len(prefixes), like.shape[1], width, like.shape[3]) for _ in range(2))
        for r, prefix in enumerate(prefixes):
            keys[r, :, : prefix.length] = prefix.keys[layer][0]
            values[r, :, : prefix.length] = prefix.values[layer][0]
        lengths = torch.tensor([p.length for p, count in self.runs for _ in range(count)], device=like.device)
        return keys, values, lengths


def no_mask(device: torch.device) -> torch.Tensor:
    """An empty 4D attention mask for the engine's passes: transformers passes a ready 4D mask to the attention as it
    is instead of building one (the shared-prefix attention builds its own masks and never reads it). Building one
    would cost operators every step and, over a `static_cache`, a read of its fill count on the host."""
    return torch.empty(0, 0, 0, 0, device=device)


class AttentionPass:
    """What the attention layers of one forward pass share: its key masks, each built by the first layer that asks
    for it and reused by the others (a mask depends on the pass and a layer's window, not on the layer's weights,
    and a decoding step's cost on a GPU is mostly its number of kernels), the layers it served (`served`, read
    by the probe), and, when the suffix cache is static (`static_cache`), the slot after the pass's new tokens
    (`suffix_end`: the static cache's own count of filled slots on the device, read once the first layer has written
    them; None: the new tokens are the suffix's last slots)."""

    def __init__(self, suffix_end: torch.Tensor | None = None) -> None:
        self._built: dict[tuple, torch.Tensor] = {}
        self.served: set[int] = set()
        self.suffix_end = suffix_end

    def mask(self, key: tuple, build: Callable[[], torch.Tensor]) -> torch.Tensor:
        if key not in self._built:
            self._built[key] = build()
        return self._built[key]


def _hidden_keys(
    new: int,
    suffix: int,
    width: int,
    lengths: int | torch.Tensor,
    padding: torch.Tensor | None,
    window: int | None,
    group: int,
    device: torch.device,
    end: int | torch.Tensor,
) -> torch.Tensor:
    """Which keys each new token may not attend to: [B or 1, 1, g·T, W + S] over [prompt ‖ suffix], or over the
    suffix alone [B or 1, 1, g·T, S] when every prompt key is visible; its rows in the (group, token) order of the
    scores.

    New token t sits in suffix slot E−T+t (E = `end`, the slot after the new tokens) at absolute position
    L_b + E−T+t − padding[b], L_b the length of path b's prompt (`lengths`: one for every path, or one per path for
    prompts stacked and zero-padded to W); a key is visible when it is not after the query, not padding, and, with a
    sliding window w, when query − key < w.
    """
    query_slot = torch.arange(new, device=device) + (end - new)
    slots = torch.arange(suffix, device=device)
    suffix_visible = (slots[None, :] <= query_slot[:, None])[None]
    if padding is not None:
        suffix_visible = suffix_visible & (slots[None, None, :] >= padding[:, None, None])
    prompt_visible = None
    if isinstance(lengths, torch.Tensor):
        prompt_visible = (torch.arange(width, device=device)[None, :] < lengths[:, None])[:, None, :]
    if window is not None and width + suffix > window:
        suffix_visible = suffix_visible & (query_slot[:, None] - slots[None, :] < window)
        starts = lengths[:, None] if isinstance(lengths, torch.Tensor) else lengths
        query_position = starts + query_slot[None, :] - (padding[:, None] if padding is not None else 0)
        in_window = torch.arange(width, device=device) > query_position[..., None] - window
        prompt_visible = in_window if prompt_visible is None else prompt_visible & in_window
    visible = suffix_visible
    if prompt_visible is not None:
        batch = max(prompt_visible.shape[0], suffix_visible.shape[0])
        visible = torch.cat([prompt_visible.expand(batch, new, width), suffix_visible.expand(batch, new, suffix)], -1)
    return ~visible.repeat(1, group, 1)[:, None]


def shared_prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    shared_prefix: SharedPrefix | PromptRuns | None = None,
    suffix_padding: torch.Tensor | None = None,
    attention_pass: AttentionPass | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """softmax(mask(cap([q·K_prompt ‖ q·K_suffix] · scale))) · [V_prompt ‖ V_suffix], cap(s) = c·tanh(s / c).

    query [B, H, T, D]; key/value [B, H_kv, S, D] are the paths' suffixes (the T new tokens last);
    `suffix_padding[b]` leading suffix slots of path b are padding, hidden from its queries and not counted in
    its positions. `attention_pass` is shared by the layers of one pass (without it each layer builds its own
    masks). Without `shared_prefix` the call goes to the model's own attention implementation.
    Returns [B, T, H, D] like the other transformers attention functions.
    """
    if shared_prefix is None:
        return _base_attention(module)(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
            sliding_window=sliding_window, softcap=softcap, **kwargs,
        )
    for unsupported in ("s_aux", "sinks"):
        if kwargs.get(unsupported) is not None:
            raise NotImplementedError(f"shared-prefix attention does not support attention sinks ({unsupported})")
    attention_pass = attention_pass if attention_pass is not None else AttentionPass()
    attention_pass.served.add(module.layer_idx)
    runs = shared_prefix.runs if isinstance(shared_prefix, PromptRuns) else ((shared_prefix, query.shape[0]),)
    scoring = _Scoring(scaling if scaling is not None else query.shape[-1] ** -0.5, sliding_window, softcap,
                       dropout if module.training else 0.0, attention_pass)
    padding = suffix_padding.to(query.device) if suffix_padding is not None else None
    if isinstance(shared_prefix, PromptRuns) and shared_prefix.stackable:
        return _attend_stacked(module.layer_idx, shared_prefix, query, key, value, padding, scoring), None
    if len(runs) == 1:
        return _attend(module.layer_idx, runs[0][0], query, key, value, padding, scoring), None
    outputs, start = [], 0
    for prefix, count in runs:
        rows = slice(start, start + count)
        outputs.append(_attend(module.layer_idx, prefix, query[rows], key[rows], value[rows],
                               padding[rows] if padding is not None else None, scoring, start))
        start += count
    return torch.cat(outputs), None


@dataclass(frozen=True)
class _Scoring:
    """How scores become attention weights: scale, soft-cap c·tanh(s / c), sliding window, dropout, and the pass's
    key masks."""

    scale: float
    sliding_window: int | None
    softcap: float | None
    dropout: float
    attention_pass: AttentionPass

    def scores(self, prompt_scores: torch.Tensor, suffix_scores: torch.Tensor, scaled: bool = False) -> torch.Tensor:
        """[prompt ‖ suffix] scores in float32, scaled (`scaled`: they were products of queries scaled already)."""
        # The few suffix scores upcast first: the concatenation then writes float32, and the prompt's scores are
        # upcast as they are copied (one pass over them, not a concatenation and an upcast).
        scores = torch.cat([prompt_scores, suffix_scores.float()], -1)
        if not scaled:
            scores = scores * self.scale
        return torch.tanh(scores / self.softcap) * self.softcap if self.softcap is not None else scores

    def hide(
        self,
        scores: torch.Tensor,
        new: int,
        suffix: int,
        width: int,
        lengths: int | torch.Tensor,
        padding: torch.Tensor | None,
        group: int,
        first_row: int = 0,
        runs: int = 0,
    ) -> None:
        """Scores of the keys a new token may not attend to (`_hidden_keys`) set to −∞ in place, for the paths from
        row `first_row` of the pass on; the mask is built by the pass's first layer on each device. Scores are
        [B, H_kv, rows, keys], or with `runs` R in run order [R, H_kv, B / R, rows, keys] (`_attend_stacked`)."""
        window, device = self.sliding_window, scores.device  # layers can sit on several devices (a device map)
        # Within one pass the prompt width and lengths follow from `first_row`; keying on them would make
        # torch.compile specialise on every prompt length.
        end = self.attention_pass.suffix_end
        key = (first_row, window, group, device, isinstance(lengths, torch.Tensor))
        mask = self.attention_pass.mask(key, lambda: _hidden_keys(
            new, suffix, width, lengths, padding, window, group, device, suffix if end is None else end.to(device)))
        if runs:  # the mask has a row per path here: stacked prompts have a length per path
            mask = mask.unflatten(0, (runs, -1)).transpose(1, 2)
        scores[..., scores.shape[-1] - mask.shape[-1]:].masked_fill_(mask, -torch.inf)

    def fusable(self, keys: int) -> bool:
        """Whether a fused attention kernel can score `keys` keys (prompt + suffix): no soft-cap, no dropout, and no
        sliding window that could hide a prompt key."""
        window = self.sliding_window
        return self.softcap is None and not self.dropout and (window is None or keys <= window)

    def weights(self, scores: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        weights = torch.softmax(scores, -1).to(dtype)
        return torch.nn.functional.dropout(weights, p=self.dropout) if self.dropout else weights


def _attend(
    layer: int,
    prefix: SharedPrefix,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    suffix_padding: torch.Tensor | None,
    scoring: _Scoring,
    first_row: int = 0,
) -> torch.Tensor:
    """Attention of the paths from row `first_row` of the pass on, which all continue `prefix` (see
    `shared_prefix_attention`): [B, T, H, D]."""
    prefix_keys = prefix.keys[layer][0]  # [H_kv, P, D]
    prefix_values = prefix.values[layer][0]
    batch, heads, new, dim = query.shape
    kv_heads, suffix = key.shape[1], key.shape[2]
    prompt_len = prefix_keys.shape[1]
    group = heads // kv_heads
    # Query head h reads kv head h // group (the repeat_kv layout); fold (path, group, token) together.
    grouped = query.reshape(batch, kv_heads, group * new, dim)
    flat = grouped.transpose(0, 1).reshape(kv_heads, batch * group * new, dim)
    prefix_scores = torch.bmm(flat, prefix_keys.transpose(1, 2)).view(kv_heads, batch, group * new, -1)
    scores = scoring.scores(prefix_scores.transpose(0, 1), _batched_product(grouped, key.transpose(2, 3)))
    scoring.hide(scores, new, suffix, prompt_len, prompt_len, suffix_padding, group, first_row)
    weights = scoring.weights(scores, query.dtype)
    prefix_weights = weights[..., :prompt_len].transpose(0, 1).reshape(kv_heads, batch * group * new, prompt_len)
    prefix_out = torch.bmm(prefix_weights, prefix_values).view(kv_heads, batch, group * new, dim).transpose(0, 1)
    return _tokens_first(prefix_out, _batched_product(weights[..., prompt_len:], value), new)


def _attend_stacked(
    layer: int,
    runs: PromptRuns,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    suffix_padding: torch.Tensor | None,
    scoring: _Scoring,
) -> torch.Tensor:
    """`_attend` for R runs of c paths each at once, their prompts stacked (`PromptRuns.stacked`): [B, T, H, D].
    Scores and weights stay in run order [R, H_kv, c, rows, W + S] from the prompt's product to its values', so
    nothing of the prompt's width is copied to reorder it (for 16 questions of an 8B model a layer's float32 scores
    weigh about as much as its weights); only the suffix's scores and the outputs change order. The queries are
    scaled before the products, which saves a pass over the scores."""
    prompt_keys, prompt_values, lengths = runs.stacked(layer)  # [R, H_kv, W, D], [B]
    count, width = len(runs.runs), prompt_keys.shape[2]
    batch, heads, new, dim = query.shape
    kv_heads, suffix = key.shape[1], key.shape[2]
    rows = heads // kv_heads * new  # (group, token) rows of one path and kv head

    grouped = (query * scoring.scale).reshape(batch, kv_heads, rows, dim)  # a pass over the queries, not the scores
    run_queries = _by_run(grouped, count).flatten(2, 3)  # [R, H_kv, c·rows, D]
    key_bias = runs.key_bias(layer)
    if key_bias is not None and scoring.fusable(width + suffix) and not torch.is_grad_enabled():
        return _attend_stacked_fused(grouped, run_queries, key_bias, prompt_keys, prompt_values, key, value,
                                     suffix_padding, scoring, new)
    prompt_scores = _batched_product(run_queries, prompt_keys.transpose(2, 3))
    suffix_scores = _by_run(_batched_product(grouped, key.transpose(2, 3)), count)
    scores = scoring.scores(prompt_scores.unflatten(2, (-1, rows)), suffix_scores, scaled=True)  # [R, H_kv, c, …]
    scoring.hide(scores, new, suffix, width, lengths, suffix_padding, heads // kv_heads, runs=count)
    weights = scoring.weights(scores, query.dtype)
    prompt_out = _batched_product(weights[..., :width].flatten(2, 3), prompt_values).unflatten(2, (-1, rows))
    return _tokens_first(_by_path(prompt_out), _batched_product(_by_path(weights[..., width:]), value), new)


def _by_run(t: torch.Tensor, runs: int) -> torch.Tensor:
    """[B, H_kv, rows, X] -> [R, H_kv, c, rows, X] for B = R·c paths in runs of c, a view."""
    return t.unflatten(0, (runs, -1)).transpose(1, 2)


def _by_path(t: torch.Tensor) -> torch.Tensor:
    """[R, H_kv, c, rows, X] -> [B, H_kv, rows, X], the inverse of `_by_run` (a copy)."""
    return t.transpose(1, 2).flatten(0, 1)


def _attend_stacked_fused(
    grouped: torch.Tensor,
    run_queries: torch.Tensor,
    key_bias: torch.Tensor,
    prompt_keys: torch.Tensor,
    prompt_values: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    suffix_padding: torch.Tensor | None,
    scoring: _Scoring,
    new: int,
) -> torch.Tensor:
    """`_attend_stacked` with the prompts' part by the fused kernel (`_prompt_attention`): the prompt enters the
    softmax over the suffix's keys as one more key, its score the log-sum-exp ℓ_p of the prompt's scores and its value
    the prompt's output out_p, so out = e^(ℓ_p−ℓ)·out_p + Σ_s e^(score_s−ℓ)·v_s with ℓ = log(e^ℓ_p + Σ_s e^score_s),
    the softmax over [prompt ‖ suffix] exactly. `grouped` holds the scaled queries [B, H_kv, rows, D], `run_queries`
    the same in run order [R, H_kv, c·rows, D]. Without gradients only: the kernels' log-sum-exp carries none."""
    rows = grouped.shape[2]
    prompt_out, prompt_lse = _prompt_attention(run_queries, prompt_keys, prompt_values, key_bias)

    def by_path(t: torch.Tensor) -> torch.Tensor:  # [R, H_kv, c·rows, X] -> [B, H_kv, rows, X]
        return _by_path(t.unflatten(2, (-1, rows)))

    scores = scoring.scores(by_path(prompt_lse[..., None]), _batched_product(grouped, key.transpose(2, 3)),
                            scaled=True)
    # Every prompt key is visible here (no window reaches it), so the mask covers the suffix alone.
    scoring.hide(scores, new, key.shape[2], prompt_keys.shape[2], prompt_keys.shape[2], suffix_padding, rows // new)
    weights = scoring.weights(scores, grouped.dtype)
    return _tokens_first(by_path(prompt_out) * weights[..., :1], _batched_product(weights[..., 1:], value), new)


def _prompt_attention(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, key_bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q·Kᵀ + bias)·V [R, H, M, D] and log Σ exp(q·Kᵀ + bias) [R, H, M] in float32, for queries already
    scaled, by the device's fused attention kernel (the scores stay in its on-chip memory): memory-efficient
    attention on CUDA, flash attention on the CPU."""
    if query.device.type == "cuda":
        out, lse = compat.efficient_attention(query, keys, values, key_bias.expand(*query.shape[:-1], keys.shape[-2]))
        return out, lse[..., : query.shape[-2]]  # the kernel pads its log-sum-exp rows to a multiple of 32
    return compat.flash_attention_cpu(query, keys, values, key_bias)


@functools.cache
def fused_attention_works(device: torch.device, dtype: torch.dtype, head_dim: int) -> bool:
    """Whether `_prompt_attention` runs on `device` for `dtype` and heads of `head_dim`, and agrees with an explicit
    softmax on a small problem with padded keys (checked once per process; False, with a message, where it does
    not: the stacked attention then writes its scores out)."""
    generator = torch.Generator().manual_seed(0)
    query, keys, values = (torch.randn(2, 2, shape, head_dim, generator=generator).to(device, dtype) * head_dim**-0.25
                           for shape in (40, 48, 48))
    key_bias = _padding_bias([48, 29], 48, dtype, device)
    scores = (query.double() @ keys.double().transpose(2, 3)) + key_bias.double()
    try:
        out, lse = _prompt_attention(query, keys, values, key_bias)
        tolerance = 1e-4 if dtype == torch.float32 else 5e-2
        works = (torch.allclose(out.double(), torch.softmax(scores, -1) @ values.double(), atol=tolerance)
                 and torch.allclose(lse.double(), torch.logsumexp(scores, -1), atol=tolerance))
        reason = "it disagrees with an explicit softmax"
    except (RuntimeError, NotImplementedError) as err:
        works, reason = False, str(err).splitlines()[0]
    if not works:
        log.warning("beliefdrift: no fused attention kernel on %s for %s (%s); stacked prompts write their attention "
                    "scores out (correct, more memory traffic)", device, dtype, reason)
    return works


def _padding_bias(lengths: Sequence[int], width: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """0 for the first `lengths[r]` of `width` keys and −∞ for the rest [R, 1, 1, width]: a fused kernel's additive
    mask for prompts zero-padded to `width`."""
    hidden = torch.arange(width, device=device) >= torch.tensor(lengths, device=device)[:, None]
    return torch.zeros(hidden.shape, dtype=dtype, device=device).masked_fill_(hidden, -torch.inf)[:, None, None]


def _batched_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b for [B, H, M, K] @ [B, H, K, N]: the batched product `@` runs, without its broadcasting steps."""
    return torch.bmm(a.flatten(0, 1), b.flatten(0, 1)).view(*a.shape[:-1], b.shape[-1])


def _tokens_first(prefix_out: torch.Tensor, suffix_out: torch.Tensor, new: int) -> torch.Tensor:
    """prefix_out + suffix_out, both [B, H_kv, g·T, D] in (group, token) row order, as a contiguous [B, T, H, D]
    (the layout the output projection reads): one copy and one in-place sum."""
    batch, kv_heads, rows, dim = prefix_out.shape

    def tokens_first(t: torch.Tensor) -> torch.Tensor:  # [B, T, H_kv, g, D] view
        return t.view(batch, kv_heads, rows // new, new, dim).permute(0, 3, 1, 2, 4)

    out = tokens_first(prefix_out).contiguous()
    out += tokens_first(suffix_out)
    return out.view(batch, new, -1, dim)


def _base_attention(module: torch.nn.Module) -> AttentionFunction:
    """The attention function the model was loaded with (eager is the module's own `eager_attention_forward`)."""
    base = BASE_IMPLEMENTATIONS[compat.attn_implementation(module.config).removeprefix(SHARED_PREFIX_ATTENTION + "_")]
    if base == "eager":
        return sys.modules[type(module).__module__].eager_attention_forward
    return ALL_ATTENTION_FUNCTIONS[base]


for _tag, _base in BASE_IMPLEMENTATIONS.items():
    AttentionInterface.register(f"{SHARED_PREFIX_ATTENTION}_{_tag}", shared_prefix_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(f"{SHARED_PREFIX_ATTENTION}_{_tag}", ALL_MASK_ATTENTION_FUNCTIONS[_base])


def base_implementation(model: PreTrainedModel) -> str:
    """The attention implementation the model runs for every forward pass the engine does not own."""
    name = compat.attn_implementation(model.config)
    if name.startswith(SHARED_PREFIX_ATTENTION + "_"):
        return BASE_IMPLEMENTATIONS[name.removeprefix(SHARED_PREFIX_ATTENTION + "_")]
    return name


def shared_prefix_support(model: PreTrainedModel) -> str | None:
    """Why the shared-prefix attention cannot serve `model` (None when it can): checked on the config and modules,
    then by a probe that every attention layer must serve through `shared_prefix_attention`, with the next-token
    probabilities of the model's own forward pass (`_probe`)."""
    config = model.config.get_text_config(decoder=True)
    layer_types = set(getattr(config, "layer_types", None) or ()) - SERVED_LAYER_TYPES
    if layer_types:
        return f"layer types {sorted(layer_types)}"
    if getattr(config, "attention_chunk_size", None):
        return "chunked attention"
    if not compat.can_set_attn_implementation(model):
        return "attention outside transformers' attention interface"
    if any(isinstance(getattr(m, "sinks", None), torch.Tensor) for m in model.modules()):
        return "attention sinks"
    if base_implementation(model) not in BASE_IMPLEMENTATIONS.values():
        return f"attention implementation {base_implementation(model)!r}"
    return _probe(model)


#: How far the shared prefix's next-token probabilities may be from the model's own forward pass in the probe (the
#: largest difference over the vocabulary). Rounding alone gives under 1e-6 in float32 and up to 0.014 in bfloat16 on
#: the test suite's families; attention scaled by 1.5 instead of 1 gives 0.03–0.15 in either (tests/test_families.py).
PROBE_TOLERANCE = {torch.float64: 1e-5, torch.float32: 1e-4}
PROBE_TOLERANCE_16_BIT = 0.03


def _probe(model: PreTrainedModel) -> str | None:
    """Why the shared prefix does not serve `model` as its own forward pass would, or None: a prompt of 6 tokens, then
    2 paths of 2 tokens in one pass through `shared_prefix_attention` as the engine runs it, which every attention
    layer must serve and whose next-token distributions must be the model's own pass's over the whole sequences within
    `PROBE_TOLERANCE`. A transformers release that changes what the attention interface hands over (positions,
    scaling, windows, soft-caps) fails the second part and leaves the model on its cache per path. Run in eval mode
    (no dropout), each module's mode restored after."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        return _probe_passes(model)
    finally:
        for module, training in modes:
            module.training = training


@torch.no_grad()
def _probe_passes(model: PreTrainedModel) -> str | None:
    device = model.get_input_embeddings().weight.device
    ids = (torch.arange(10, device=device) * 7919 + 11) % model.get_input_embeddings().num_embeddings
    prompt, suffixes = ids[None, :6], ids[6:].view(2, 2)
    cache = full_cache()
    try:
        model(input_ids=prompt, **cache_argument(model, cache), use_cache=True, logits_to_keep=1)
        prefix = SharedPrefix.from_cache(cache)
        attention_pass = AttentionPass()
        logits = model(input_ids=suffixes, position_ids=torch.arange(6, 8, device=device).expand(2, -1),
                       attention_mask=no_mask(device), **cache_argument(model, full_cache()),
                       shared_prefix=PromptRuns.of([prefix] * 2), attention_pass=attention_pass, use_cache=True,
                       logits_to_keep=1).logits[:, -1]
    except (NotImplementedError, ValueError, TypeError, AttributeError) as err:
        return f"probe failed: {first_line(err)}"
    layers, served = len(prefix.keys), attention_pass.served
    if served != set(range(layers)):
        return f"{layers - len(served)} of {layers} layers bypass the attention interface"
    plain = model(input_ids=torch.cat([prompt.expand(2, -1), suffixes], 1), use_cache=False,
                  logits_to_keep=1).logits[:, -1]
    gap = float((logits.float().softmax(-1) - plain.float().softmax(-1)).abs().max())
    tolerance = PROBE_TOLERANCE.get(logits.dtype, PROBE_TOLERANCE_16_BIT)
    if not gap <= tolerance:
        return (f"its probabilities differ from the model's own forward pass by {gap:.2g} (more than {tolerance:g}) "
                f"under transformers {transformers.__version__}: what the engine reads from transformers has changed "
                f"since the versions it was checked against (backend/compat.py)")
    return None


def enable_shared_prefix(model: PreTrainedModel) -> bool:
    """Route engine forward passes through `shared_prefix_attention`, keeping the model's own implementation for
    every other pass; False (and the model unchanged) when the model cannot be served (see `shared_prefix_support`).
    The answer is computed once per model and remembered."""
    known = getattr(model, "_beliefdrift_shared_prefix", None)
    if known is not None:
        return known
    capped_attention(model)
    base = base_implementation(model)
    tag = next((t for t, b in BASE_IMPLEMENTATIONS.items() if b == base), None)
    if tag is not None and compat.can_set_attn_implementation(model):
        model.set_attn_implementation(f"{SHARED_PREFIX_ATTENTION}_{tag}")
    reason = shared_prefix_support(model)
    if reason is not None:
        if compat.attn_implementation(model.config) != base:
            model.set_attn_implementation(base)
        log.warning("beliefdrift: %s cannot share one prompt cache between paths (%s); using a full cache per path "
                    "(correct, slower)", type(model).__name__, reason)
    model._beliefdrift_shared_prefix = reason is None
    return reason is None


def use_per_path_cache(model: PreTrainedModel) -> None:
    """Serve `model` with a full cache per path even where the shared prefix could: the reference the tests check
    the shared prefix against (tests/test_engine.py, tests/test_families.py)."""
    capped_attention(model)
    model._beliefdrift_shared_prefix = False


def capped_attention(model: PreTrainedModel) -> None:
    """Switch `model` from SDPA to eager attention where its config soft-caps attention scores, c·tanh(s / c): SDPA
    cannot, and transformers releases that run Gemma-2 on SDPA (5.17 among them) drop the cap without a word. The
    engine's attention caps, so the prompt's pass and the answers' would otherwise be two different models."""
    config = model.config.get_text_config(decoder=True)
    if not getattr(config, "attn_logit_softcapping", None) or base_implementation(model) != "sdpa":
        return
    model.set_attn_implementation("eager")
    log.warning("beliefdrift: %s soft-caps its attention scores, which SDPA cannot; using eager attention",
                type(model).__name__)
