"""Load a causal LM and its tokenizer: hub id, local directory, GGUF file, or a registry name.

GGUF files are dequantized by transformers (slow: ~20-40 s for 135M parameters), so the converted
model is saved once as safetensors + tokenizer under the user cache directory and re-used.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from beliefdrift.backend.local import TransformersModel
from beliefdrift.backend.model import LanguageModel
from beliefdrift.backend.model_files import check_model, gguf_cache_path, locate_registry_gguf
from beliefdrift.backend.served.model import ServedModel, connect, served_identity, served_model
from beliefdrift.backend.served.spec import SERVED_SETTINGS, is_served
from beliefdrift.config.options import ModelOptions, parse_model_args
from beliefdrift.errors import UserError, first_line
from beliefdrift.progress import progress_shown
from beliefdrift.registry import ATTN_IMPLEMENTATIONS, DEFAULT_MODEL, REGISTRY


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """`auto` is bf16 where matrix products in bf16 are fast (CUDA with bf16, CPUs with AMX or
    AVX512-BF16), float32 elsewhere: on AVX2-only CPUs bf16 matmuls are emulated and ~100x slower."""
    if dtype == "float32":
        return torch.float32
    if dtype == "bfloat16":
        return torch.bfloat16
    if dtype != "auto":
        raise ValueError(f"unknown dtype {dtype!r}; expected auto, float32 or bfloat16")
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    return torch.bfloat16 if _cpu_has_fast_bf16() else torch.float32


def _cpu_has_fast_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"--device {device} requested but CUDA is not available")
    return torch.device(device)


def check_device(device: str) -> None:
    """`device` names a device this machine has (cpu, cuda, cuda:N or auto)."""
    if device == "auto":
        return
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise UserError(f"--device {device}: unknown device; expected cpu, cuda, cuda:N or auto") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {device}: no CUDA GPU is available on this machine; use --device cpu or auto")
    if kind not in ("cpu", "cuda"):
        raise UserError(f"--device {device}: unsupported device type {kind!r}; expected cpu, cuda, cuda:N or auto")


def converted_gguf_dir(gguf: Path) -> Path:
    """Directory holding the safetensors conversion of `gguf`, converting on first use."""
    target = gguf_cache_path(gguf)
    if (target / "config.json").exists():
        return target
    try:
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except MemoryError:
        raise
    except Exception as err:  # the GGUF reader's errors on a damaged or foreign file are of many types
        raise UserError(f"--model {gguf}: not a GGUF model transformers can read ({first_line(err)}); expected a "
                        "llama.cpp model file") from err
    # The GGUF weights are already dequantized to float32; drop the quantizer so they can be saved.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write to a temporary sibling and rename, so an interrupted conversion never leaves a half cache.
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".converting-"))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def model_source(spec: str) -> Path | str:
    """Map a `--model` value to something `from_pretrained` accepts (a directory or a hub id)."""
    if spec in REGISTRY:
        return converted_gguf_dir(locate_registry_gguf(spec))
    path = Path(spec).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file not found: {path}")
        return converted_gguf_dir(path)
    if path.is_dir():
        return path
    if path.exists() or spec.startswith((".", "/", "~")):
        raise FileNotFoundError(f"--model {spec!r}: not a model directory or .gguf file")
    return spec  # a hub id


@contextlib.contextmanager
def _transformers_bars(show: bool) -> Iterator[None]:
    """transformers' own progress bars (loading weights) off while `show` is False (the CLI's --quiet), as before
    afterwards."""
    shown = hf_logging.is_progress_bar_enabled()
    if shown and not show:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown and not show:
            hf_logging.enable_progress_bar()


def model_from(options: ModelOptions) -> LanguageModel:
    """The model that `options` names, with its device, dtype, attention, device map and
    from_pretrained keywords as set, after checking that the device exists and the model can be found, so that either
    is a one-line error. `--model openai:BASE_URL` is a model behind an inference server (`backend.served`)."""
    if is_served(options.model):
        return served_model(options)
    check_device(options.device)
    check_model(options.model)
    return load_model(options.model, device=options.device, dtype=options.dtype,
                      attn_implementation=options.attn_implementation, device_map=options.device_map,
                      **options.pretrained_kwargs())


def pinned_model(values: Mapping[str, Any], settings: ModelOptions, lm: LanguageModel | None = None) -> dict[str, Any]:
    """A run identity's `values` (what of `settings` changes a number) with the model they name pinned: a model behind
    an inference server by its endpoint, served name, tokenizer and what the server reports about itself
    (`served_identity`, or the connected `lm`'s) in place of the local-model settings (`SERVED_SETTINGS`); a local
    model's dtype and device resolved where the dtype is pinned (`auto`: what it loads as)."""
    if is_served(str(values.get("model", ""))):
        pinned = (lm.identity() if isinstance(lm, ServedModel) else
                  served_identity(values["model"], parse_model_args(settings.model_args)))
        return {key: value for key, value in values.items() if key not in SERVED_SETTINGS} | pinned
    if "dtype" not in values:
        return dict(values)
    device = resolve_device(settings.device)
    return {**values, "dtype": str(resolve_dtype(settings.dtype, device)).removeprefix("torch."),
            "device": device.type}


def check_trainable(options: ModelOptions) -> None:
    """The model that `options` (a `config.TrainConfig`'s) names can be trained here: loaded locally (a model behind an
    inference server gives no gradients), on a device this machine has, and found; else a one-line error."""
    if is_served(options.model):
        raise UserError(f"--model {options.model}: train needs the model's gradients, which a model behind an "
                        "inference server does not give; train the same weights loaded locally (a hub id, directory "
                        "or .gguf)")
    check_device(options.device)
    check_model(options.model)


def load_model(
    spec: str = DEFAULT_MODEL,
    *,
    device: str = "cpu",
    dtype: str = "auto",
    attn_implementation: str = "auto",
    device_map: str | dict | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    model_args: Mapping[str, Any] | None = None,
) -> LanguageModel:
    """Load `spec` (registry name, hub id, local directory or .gguf path) in eval mode, or connect to the model
    behind an inference server (`openai:BASE_URL`, `backend.served.connect`: `model_args` are its options then).

    The defaults are the CLI's (`--device cpu`, `--dtype auto`: `resolve_dtype`, so float32 on a CPU without fast
    bf16 matrix products, as before). `attn_implementation` (auto = transformers' choice for the model) runs every
    forward pass the engine does not own; `device_map` ("auto" or an accelerate map) spreads a model over several
    devices instead of `device`. `revision` and `trust_remote_code` go to both `from_pretrained` calls,
    `model_args` (`config.parse_model_args`) to the model's.
    """
    if is_served(spec):
        return connect(spec, model_args, revision, trust_remote_code)
    if attn_implementation not in ATTN_IMPLEMENTATIONS:
        raise ValueError(f"unknown attention implementation {attn_implementation!r}; expected one of "
                         f"{', '.join(ATTN_IMPLEMENTATIONS)}")
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    source = model_source(spec)
    hub: dict[str, Any] = {"revision": revision} if revision is not None else {}
    if trust_remote_code:
        hub["trust_remote_code"] = True
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **hub)
    except (OSError, ValueError) as err:
        raise UserError(f"--model {spec}: cannot load its tokenizer ({' '.join(str(err).split())}); expected its "
                        "tokenizer files (tokenizer.json, or tokenizer_config.json with the vocabulary it "
                        "names)") from err
    options = {**hub, **(model_args or {})}
    if attn_implementation != "auto":
        options["attn_implementation"] = attn_implementation
    if device_map is not None:
        options["device_map"] = device_map
    with _transformers_bars(progress_shown()):
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, **options)
    if device_map is None:
        model.to(torch_device)
    model.eval()
    return TransformersModel(model=model, tokenizer=tokenizer, name=spec)
