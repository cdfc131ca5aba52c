"""The SC-tuned model: a PEFT LoRA adapter on top of the base model, sharing its weights and tokenizer."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

from beliefdrift.backend import LanguageModel


def load_adapter(lm: LanguageModel, path: str | Path) -> LanguageModel:
    """The SC-tuned model: `lm` with the LoRA adapter at `path` (a second LanguageModel, same tokenizer).

    PEFT injects the LoRA layers into `lm.model` in place, so from now on run the base model inside
    `base_model(adapter_lm)`.
    """
    from peft import PeftModel

    path = Path(path)
    if not (path / "adapter_config.json").is_file():
        raise FileNotFoundError(f"--adapter {path}: not a PEFT adapter directory (no adapter_config.json)")
    tuned = PeftModel.from_pretrained(lm.model, str(path))
    tuned.eval()
    return LanguageModel(model=tuned, tokenizer=lm.tokenizer, name=f"{lm.name}+{path.name}")


def base_model(adapter_lm: LanguageModel | None) -> Any:
    """Context in which the base model runs without the adapter layers `load_adapter` injected."""
    return adapter_lm.model.disable_adapter() if adapter_lm is not None else nullcontext()
