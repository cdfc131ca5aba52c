"""The SC-tuned model: a PEFT LoRA adapter on top of the base model, sharing its weights and tokenizer."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from beliefdrift.backend.local import TransformersModel
from beliefdrift.backend.model import LanguageModel
from beliefdrift.errors import UserError, first_line

CONFIG_FILE = "adapter_config.json"
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")


def check_adapter(path: str | Path) -> Path:
    """`path` as a PEFT adapter directory whose config peft can read and that holds finite weights, checked before
    any model loads: a missing or malformed `adapter_config.json` (not JSON, not a mapping, no or an unknown
    `peft_type`, settings peft rejects), missing weights or weights with a NaN or an infinity (a diverged training)
    is one error naming the directory."""
    from peft import PeftConfig
    from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING

    path = Path(path).expanduser()  # "~/…" from a YAML file, where no shell expanded it
    where = f"--adapter {path}"
    config_file = path / CONFIG_FILE
    if not config_file.is_file():
        raise FileNotFoundError(f"{where}: not a PEFT adapter directory (no {CONFIG_FILE})")
    try:
        values = json.loads(config_file.read_bytes())
    except (OSError, ValueError) as err:  # unreadable, not UTF-8, not JSON
        raise UserError(f"{where}: {CONFIG_FILE} is not readable JSON ({first_line(err)})") from None
    expected = "a directory written by `beliefdrift train` (OUT/adapter) or peft's save_pretrained"
    if not isinstance(values, dict):
        raise UserError(f"{where}: {CONFIG_FILE} holds a {type(values).__name__}, not a mapping of settings; "
                        f"expected {expected}")
    peft_type = values.get("peft_type")
    if peft_type not in PEFT_TYPE_TO_CONFIG_MAPPING:
        what = "names no peft_type" if peft_type is None else f"names an unknown peft_type {peft_type!r}"
        raise UserError(f"{where}: {CONFIG_FILE} {what} (a LoRA adapter's is \"LORA\"); expected {expected}")
    try:
        PeftConfig.from_pretrained(str(path))
    except Exception as err:  # peft's config classes reject bad settings in many ways (TypeError, ValueError, …)
        raise UserError(f"{where}: peft cannot read {CONFIG_FILE} ({type(err).__name__}: {first_line(err)}); "
                        f"expected {expected}") from err
    weights = next((path / name for name in WEIGHT_FILES if (path / name).is_file()), None)
    if weights is None:
        raise UserError(f"{where}: no adapter weights ({' or '.join(WEIGHT_FILES)}); expected {expected}")
    broken = non_finite_tensors(weights)
    if broken:
        raise UserError(f"{where}: {weights.name} holds weights that are not finite numbers ({', '.join(broken[:3])}"
                        f"{', …' if len(broken) > 3 else ''}): its training diverged; train it again with a lower "
                        "--learning-rate")
    return path


def non_finite_tensors(weights: Path) -> list[str]:
    """The names of the tensors in an adapter weights file that hold a NaN or an infinity (none: [])."""
    import torch

    if weights.suffix == ".safetensors":
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(weights, "pt") as tensors:
                loaded = {name: tensors.get_tensor(name) for name in tensors.keys()}  # noqa: SIM118 (not a dict)
        except (OSError, SafetensorError):
            return []  # unreadable: peft names it when it loads the adapter
    else:
        try:
            loaded = torch.load(weights, weights_only=True, map_location="cpu")
        except Exception:  # noqa: BLE001 (unreadable: peft names it when it loads the adapter)
            return []
    return sorted(name for name, tensor in loaded.items()
                  if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and not tensor.isfinite().all())


def load_adapter(lm: LanguageModel, path: str | Path) -> TransformersModel:
    """The SC-tuned model: `lm` with the LoRA adapter at `path` (a second model, same tokenizer and engine settings).

    PEFT injects the LoRA layers into `lm.model` in place, so from now on run the base model inside
    `base_model(adapter_lm)`. An adapter that does not fit the model (another base model's, damaged weights) is
    one error naming the directory.
    """
    import torch
    from peft import PeftModel

    path = check_adapter(path)
    if not isinstance(lm, TransformersModel):
        raise UserError(f"--adapter {path}: {lm.name} has no weights here to put it on; serve the adapter with the "
                        "model (vLLM: --lora-modules) and name it with --model-args served_model=NAME")
    try:
        tuned = PeftModel.from_pretrained(lm.model, str(path))
    except torch.OutOfMemoryError:
        raise
    except Exception as err:  # shapes of another model, unreadable weights, modules the model lacks, …
        lines = [line.strip() for line in str(err).splitlines() if line.strip()][:2]  # torch's heading, then what
        raise UserError(f"--adapter {path}: cannot load the adapter onto {lm.name} ({type(err).__name__}: "
                        f"{' '.join(lines) or first_line(err)}); was it trained on this --model?") from err
    tuned.eval()
    return TransformersModel(model=tuned, tokenizer=lm.tokenizer, name=f"{lm.name}+{path.name}", engine=lm.engine)


def base_model(adapter_lm: TransformersModel | None) -> AbstractContextManager[None]:
    """Context in which the base model runs without the adapter layers `load_adapter` injected."""
    return adapter_lm.model.disable_adapter() if adapter_lm is not None else nullcontext()
