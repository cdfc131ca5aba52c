"""The transformers model inside its DDP/FSDP and peft wrappers, for what the wrapper does not say itself: its
config and the device its inputs go to."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside DDP/FSDP wrappers (for its config); the wrapper itself is what gets called."""
    while hasattr(model, "module"):
        model = model.module
    return model


def transformers_model(model: torch.nn.Module) -> PreTrainedModel:
    """The transformers model inside DDP/FSDP and peft wrappers."""
    base = unwrapped(model)
    return base.get_base_model() if hasattr(base, "get_base_model") else base


def input_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's input embedding (DDP/peft wrappers are looked through)."""
    return unwrapped(model).get_input_embeddings().weight.device
