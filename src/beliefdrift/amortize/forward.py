"""Differentiable answer conditionals on a shared prefix, for the SC loss.

For a group (Q, a_{1:n}) and rollouts A^{(j)}_{n+1:n+D}, j = 1 … J, the loss needs

    log θ^{(j)}_d = log p_φ(· | x_Q, a_{1:n}, A^{(j)}_{n+1:n+d})   (label tokens only),  d = 0 … D,

with gradients, and the log label mass log Σ_{a ∈ 𝒜} p_φ(a | …) under the full-vocabulary softmax (how well the
model follows the answer format: `valid_mass` elsewhere). The prompt and prefix run once (batch 1) into a KV cache
whose tensors keep their autograd graph; the J rollout suffixes then attend to it through `SharedPrefix` in one
batched forward pass per chunk, reading the logits after every answer. So the ~500-token prompt is processed once
per update, not J times.

Both passes write a `one_pass_cache`: every layer keeps all positions (sliding-window layers are masked at attention
time, never truncated) and a second write of a layer, gradient checkpointing's recompute, replaces the first, so
the decoder layers can be checkpointed with their cache (`enable_gradient_checkpointing`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from transformers.modeling_layers import GradientCheckpointingLayer

from beliefdrift.backend import AnswerTokens, compat
from beliefdrift.backend.kv_cache import cache_argument, one_pass_cache
from beliefdrift.backend.path_cache import shares_prefix
from beliefdrift.backend.shared_prefix import AttentionPass, SharedPrefix
from beliefdrift.backend.wrappers import input_device, unwrapped


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Non-reentrant activation checkpointing of every decoder layer, keeping the layers' KV cache: transformers
    drops the cache of a checkpointed layer because a recompute would append to it twice, which a
    `one_pass_cache` does not."""
    base = unwrapped(model)
    if hasattr(base, "activation_checkpointing_enable"):  # transformers 5 renamed it; the old name warns
        base.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for layer in model.modules():
        if isinstance(layer, GradientCheckpointingLayer):
            compat.checkpoint_with_cache(layer)


class Conditionals(NamedTuple):
    """log θ over the labels [..., |𝒜|] and the log label mass log Σ_{a ∈ 𝒜} p(a) [...] at the same positions."""

    log_theta: torch.Tensor
    log_mass: torch.Tensor


def _label_log_probs(logits: torch.Tensor, label_ids: torch.Tensor) -> Conditionals:
    """log θ = log_softmax of the label-token logits (the same θ as `AnswerDist.from_logits`) and the log label
    mass logsumexp(label logits) − logsumexp(all logits)."""
    logits = logits.float()
    label_logits = logits[..., label_ids]
    label_norm = torch.logsumexp(label_logits, dim=-1)
    return Conditionals(label_logits - label_norm[..., None], label_norm - torch.logsumexp(logits, dim=-1))


@dataclass(frozen=True)
class PrefixState:
    """The prompt + prefix a_{1:n} encoded once: its token ids [1, L], its KV cache (with graph; None for a model
    the shared prefix cannot serve) and log θ_n = log p_φ(· | a_{1:n}) with its log label mass."""

    ids: torch.Tensor
    prefix: SharedPrefix | None
    first: Conditionals  # log θ [|𝒜|], log mass []


def encode_prefix(model: torch.nn.Module, tokens: AnswerTokens, prefix: Sequence[int]) -> PrefixState:
    """One forward pass over the prompt followed by the answers `prefix` (label indices), as batch 1.

    Gradients flow when grad mode is on. The pass runs the model's own attention; the rollouts then attend to the
    cache through `shared_prefix_attention` (`backend.shared_prefix`), or run as full sequences where the model
    cannot be served that way.
    """
    device = input_device(model)
    ids = torch.tensor([list(tokens.prompt_ids) + [t for answer in prefix for t in tokens.answer_ids(answer)]],
                       device=device)
    cache = one_pass_cache()
    logits = model(input_ids=ids, **cache_argument(model, cache), use_cache=True, logits_to_keep=1).logits
    label_ids = torch.tensor(tokens.label_ids, dtype=torch.long, device=logits.device)
    shared = SharedPrefix.from_cache(cache) if shares_prefix(model) else None
    return PrefixState(ids, shared, _label_log_probs(logits[0, -1], label_ids))


def rollout_conditionals(
    model: torch.nn.Module, tokens: AnswerTokens, state: PrefixState, rollouts: torch.Tensor
) -> Conditionals:
    """log θ after each rollout answer: [B, D, |𝒜|] for rollouts [B, D] (label indices), one forward pass.

    Entry [b, d−1] is log p_φ(· | a_{1:n}, A^{(b)}_{n+1:n+d}), read at the last token of answer d.
    """
    device = state.ids.device
    answer_ids = torch.tensor([tokens.answer_ids(i) for i in range(len(tokens.label_ids))], device=device)
    batch, depth = rollouts.shape
    input_ids = answer_ids[rollouts.to(device)].reshape(batch, -1)
    read = torch.arange(1, depth + 1, device=device) * tokens.step_length - 1  # last token of every answer
    if state.prefix is None:  # a full sequence per path: prompt, prefix and rollout in one plain pass
        sequences = torch.cat([state.ids.expand(batch, -1), input_ids], 1)
        logits = model(input_ids=sequences, logits_to_keep=read + state.ids.shape[1]).logits
    else:
        positions = state.prefix.length + torch.arange(input_ids.shape[1], device=device).expand(batch, -1)
        logits = model(
            input_ids=input_ids,
            position_ids=positions,
            **cache_argument(model, one_pass_cache()),
            shared_prefix=state.prefix,
            attention_pass=AttentionPass(),
            use_cache=True,
            logits_to_keep=read,
        ).logits
    label_ids = torch.tensor(tokens.label_ids, dtype=torch.long, device=logits.device)
    return _label_log_probs(logits, label_ids)


def repeat_first(first: Conditionals, paths: int) -> Conditionals:
    """log θ_n [|𝒜|] and its log mass [] as column d = 0 of every path: [J, 1, |𝒜|] and [J, 1]."""
    return Conditionals(first.log_theta.expand(paths, 1, -1), first.log_mass.expand(paths, 1))


def join(head: Conditionals, chunks: Sequence[Conditionals]) -> Conditionals:
    """[J, D+1, …]: the d = 0 column `head` followed by the chunks' [B_m, D, …] concatenated over paths."""
    if not chunks:
        return head
    return Conditionals(*(torch.cat([first, torch.cat(parts)], 1) for first, *parts in zip(head, *chunks, strict=True)))


def conditionals(
    model: torch.nn.Module,
    tokens: AnswerTokens,
    prefix: Sequence[int],
    rollouts: torch.Tensor,
    micro_batch: int | None = None,
) -> Conditionals:
    """log θ^{(j)}_d for d = 0 … D: [J, D+1, |𝒜|] (d = 0 is log θ_n, shared by every path), and the log label
    masses [J, D+1].

    The prompt + prefix run once; the rollouts [J, D] run `micro_batch` paths per forward pass (all at once
    when None). Every chunk keeps its graph until the caller's backward pass: the SC loss is a function of the
    mean over all J paths, so the chunks bound the size of each forward pass, not what autograd stores
    (`amortize.backward.backward_sc_loss` with caching does).
    """
    state = encode_prefix(model, tokens, prefix)
    head = repeat_first(state.first, rollouts.shape[0])
    chunks = rollouts.split(micro_batch or rollouts.shape[0]) if rollouts.shape[1] else ()
    return join(head, [rollout_conditionals(model, tokens, state, c) for c in chunks])
