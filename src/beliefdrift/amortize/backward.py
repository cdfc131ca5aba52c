"""The backward pass of one SC update: in one graph, or micro-batch by micro-batch (gradient caching).

The SC loss couples every path of the update through the Monte-Carlo predictives p̂^(k), so back-propagating it in
one graph keeps all J paths' activations alive. Gradient caching splits the chain rule at the conditionals:

    ∂L/∂φ = Σ_m ⟨∂L/∂c_m, ∂c_m/∂φ⟩ + ⟨∂L/∂c_0, ∂c_0/∂φ⟩,   c_m = (log θ, log mass) of micro-batch m, c_0 = the prefix's

(c_m also depends on φ through the prefix's keys and values K, so ∂L/∂K = Σ_m ⟨∂L/∂c_m, ∂c_m/∂K⟩ joins the prefix
term). First every c_m is computed without a graph and ∂L/∂c_m taken on detached copies (the cross-path
quantities: both predictives, ℓ_j, the advantages, the format mean); then each micro-batch is run again with its
graph and back-propagated alone, from detached copies of K that collect ∂L/∂K. The prompt + prefix graph (batch 1,
the same for every micro-batch) is kept from the start and back-propagated once, last: recomputing it per
micro-batch would repeat its forward and backward passes, the largest of the update, to save a graph no larger
than itself. So autograd holds the prefix and one micro-batch at a time, whatever the paths per update.

The gradient is the one-graph gradient exactly (same values, same summation order): micro-batches are
back-propagated last to first, as autograd orders the one graph, each replaying the dropout masks of its first run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from beliefdrift.amortize.forward import (
    Conditionals,
    PrefixState,
    conditionals,
    encode_prefix,
    join,
    repeat_first,
    rollout_conditionals,
)
from beliefdrift.amortize.loss import SCLossOutput
from beliefdrift.backend import AnswerTokens

LossFunction = Callable[[Conditionals], SCLossOutput]
RNGState = tuple[torch.Tensor, list[torch.Tensor]]


def backward_sc_loss(
    model: torch.nn.Module,
    tokens: AnswerTokens,
    prefix: Sequence[int],
    rollouts: torch.Tensor,
    loss_fn: LossFunction,
    micro_batch: int,
    caching: bool = True,
    scale: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> SCLossOutput:
    """Accumulate ∂L/∂φ into the gradients of the model's trainable parameters, L = loss_fn(conditionals) over
    the rollouts [J, D] run `micro_batch` paths per forward pass; returns L's terms. `scale` maps the loss to
    what is differentiated (a mixed-precision loss scaler; default the loss itself)."""
    scale = scale or (lambda loss: loss)
    if not caching:
        out = loss_fn(conditionals(model, tokens, prefix, rollouts, micro_batch))
        scale(out.loss).backward()
        return out
    state = encode_prefix(model, tokens, prefix)  # its graph is back-propagated once, at the end
    chunks = rollouts.split(micro_batch) if rollouts.shape[1] else ()
    seeds, cached = [], []
    with torch.no_grad():
        for chunk in chunks:
            seeds.append(_rng_state())
            cached.append(_detached(rollout_conditionals(model, tokens, state, chunk)))
    after = _rng_state()
    first = _detached(state.first)
    out = loss_fn(join(repeat_first(first, rollouts.shape[0]), cached))
    outputs = [*first, *(t for c in cached for t in c)]
    grads = torch.autograd.grad(scale(out.loss), outputs, allow_unused=True)  # None: a term the loss leaves out
    first_grads, chunk_grads = grads[:2], [grads[i : i + 2] for i in range(2, len(grads), 2)]

    params = [p for p in model.parameters() if p.requires_grad]
    # The micro-batches attend to leaf copies of the prompt's cache; without one they re-run their whole sequences.
    keys, values = (state.prefix.keys, state.prefix.values) if state.prefix is not None else ((), ())
    leaves = [t.detach().requires_grad_() for t in (*keys, *values)]
    shared = None
    if state.prefix is not None:
        shared = replace(state.prefix, keys=tuple(leaves[: len(keys)]), values=tuple(leaves[len(keys) :]))
    detached = PrefixState(state.ids, shared, first)
    sums: list[torch.Tensor | None] = [None] * (len(params) + len(leaves))
    for m in reversed(range(len(chunks))):
        _set_rng_state(seeds[m])
        used = [(t, g) for t, g in zip(rollout_conditionals(model, tokens, detached, chunks[m]), chunk_grads[m],
                                       strict=True) if g is not None]
        parts = torch.autograd.grad([t for t, _ in used], params + leaves, [g for _, g in used], allow_unused=True)
        sums = [_accumulate(total, part) for total, part in zip(sums, parts, strict=True)]
    _set_rng_state(after)
    for param, total in zip(params, sums[: len(params)], strict=True):
        param.grad = _accumulate(param.grad, total)
    prefix_outputs = [*state.first, *keys, *values]
    prefix_grads = [*first_grads, *sums[len(params) :]]
    used = [(t, g) for t, g in zip(prefix_outputs, prefix_grads, strict=True) if g is not None]
    torch.autograd.backward([t for t, _ in used], [g for _, g in used])
    return SCLossOutput(*(t.detach() for t in out))


def _detached(conditionals: Conditionals) -> Conditionals:
    """Leaf copies that collect ∂L/∂(log θ, log mass)."""
    return Conditionals(*(t.detach().requires_grad_() for t in conditionals))


def _accumulate(total: torch.Tensor | None, part: torch.Tensor | None) -> torch.Tensor | None:
    """total + part in place, as autograd accumulates gradients (None: nothing yet)."""
    if part is None or total is None:
        return part if total is None else total
    return total.add_(part)


def _rng_state() -> RNGState:
    """The generators dropout draws from: the CPU's and every GPU's (a model may be split over several)."""
    return torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []


def _set_rng_state(state: RNGState) -> None:
    torch.set_rng_state(state[0])
    if state[1]:
        torch.cuda.set_rng_state_all(state[1])


class SavedTensorMeter:
    """Bytes of the tensors autograd keeps for backward passes of graphs built inside the context (each storage
    once, the model's parameters left out): `current` and `peak`. What one graph or one micro-batch costs, on any
    device."""

    def __init__(self, model: torch.nn.Module | None = None):
        self.current = self.peak = 0
        self._held: dict[int, int] = {}  # storage address → how many saved tensors use it
        self._parameters = {p.untyped_storage().data_ptr() for p in model.parameters()} if model is not None else set()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def __enter__(self) -> SavedTensorMeter:
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor | _Saved:
        address = tensor.untyped_storage().data_ptr()
        if address in self._parameters or not address:
            return tensor
        self._held[address] = self._held.get(address, 0) + 1
        if self._held[address] == 1:
            self.current += tensor.untyped_storage().nbytes()
            self.peak = max(self.peak, self.current)
        return _Saved(self, tensor.detach(), address)  # detached: a saved output would reference its own node

    @staticmethod
    def _unpack(saved: torch.Tensor | _Saved) -> torch.Tensor:
        return saved.tensor if isinstance(saved, _Saved) else saved

    def _release(self, tensor: torch.Tensor, address: int) -> None:
        self._held[address] -= 1
        if not self._held[address]:
            del self._held[address]
            self.current -= tensor.untyped_storage().nbytes()


class _Saved:
    """A tensor saved for backward, counted by its meter until the graph that saved it is freed."""

    def __init__(self, meter: SavedTensorMeter, tensor: torch.Tensor, address: int):
        self.meter, self.tensor, self.address = meter, tensor, address

    def __del__(self) -> None:
        self.meter._release(self.tensor, self.address)
