"""What several commands do the same way: load the model their model options name."""

from __future__ import annotations

from beliefdrift.backend import LanguageModel, load_model
from beliefdrift.config import ModelOptions
from beliefdrift.errors import check_device, check_model


def load_language_model(options: ModelOptions) -> LanguageModel:
    """The model of `options` (device, dtype, attention and device map as set), after checking that the device
    exists and the model name can be found, so that either is a one-line error."""
    check_device(options.device)
    check_model(options.model)
    return load_model(options.model, device=options.device, dtype=options.dtype,
                      attn_implementation=options.attn_implementation, device_map=options.device_map)
