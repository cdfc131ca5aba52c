"""Every private name of torch and transformers the package touches, in one place.

A private name is an attribute that starts with one underscore and that torch or transformers defines (`torch._dynamo`,
`torch.ops.aten._scaled_dot_product_efficient_attention`, `config._attn_implementation`); a minor release may rename
one or change what it means without notice. Each is reached only through a function here, and
`tests/test_layers.py` checks that no other module of the package names one. Checked against torch 2.11 and 2.13 and
transformers 5.17 and 5.24 (the versions the whole suite passes with, docs/models.md); `pyproject.toml` keeps both
within their major version. What the engine computes through transformers is checked against the model's own
forward pass at the first use of each model (`shared_prefix._probe`), so a release that would move θ leaves the model on
its cache per path, with a warning naming the version, instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from transformers import PretrainedConfig, PreTrainedModel


def attn_implementation(config: PretrainedConfig) -> str:
    """The attention implementation a model runs (transformers keeps it in a private field of the config; the
    public `set_attn_implementation` changes it)."""
    return config._attn_implementation


def can_set_attn_implementation(model: PreTrainedModel) -> bool:
    """Whether `model`'s attention goes through transformers' attention interface, so that an implementation can be
    registered for it (False for models that bring their own attention code)."""
    return model._can_set_attn_implementation()


def efficient_attention(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                        bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q·Kᵀ + bias)·V and its rows' log-sum-exp by CUDA's memory-efficient kernel, queries already scaled
    (`bias` broadcast to [..., M, N]); the log-sum-exp rows are padded to a multiple of 32 by the kernel."""
    out, lse, *_ = torch.ops.aten._scaled_dot_product_efficient_attention(query, keys, values, bias, True, scale=1.0)
    return out, lse


def flash_attention_cpu(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                        bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same by the CPU's flash attention kernel (`bias` broadcast by the kernel)."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(query, keys, values, attn_mask=bias, scale=1.0)


@contextlib.contextmanager
def compiler_errors_suppressed(recompile_limit: int = 64) -> Iterator[None]:
    """Within the context only (torch's settings are restored after it): a graph that fails to compile runs eagerly,
    with torch's warning, instead of raising, and a function may compile up to `recompile_limit` graphs (the engine's
    differ by batch structure, not by size)."""
    limit = max(torch._dynamo.config.recompile_limit, recompile_limit)
    with torch._dynamo.config.patch(suppress_errors=True, recompile_limit=limit):
        yield


def checkpoint_with_cache(layer: torch.nn.Module) -> None:
    """Let a gradient-checkpointed decoder layer keep its KV cache (transformers drops it otherwise)."""
    layer._can_checkpoint_with_cache = True
