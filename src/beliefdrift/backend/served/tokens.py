"""The served model's tokenizer, and how a server's responses name its tokens: by id (`completions.Key` an int) or by
the token's text, read through one map of the vocabulary's texts built once."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer, GenerationConfig, PreTrainedTokenizerBase

from beliefdrift.backend.model import GenerationSettings
from beliefdrift.backend.model_files import gguf_cache_path, locate_registry_gguf
from beliefdrift.backend.served.completions import Key
from beliefdrift.backend.served.spec import ServedError
from beliefdrift.errors import first_line
from beliefdrift.registry import REGISTRY


def _gguf(source: str) -> Path | None:
    """The GGUF file `source` names (a registry name or a .gguf path), else None."""
    path = locate_registry_gguf(source) if source in REGISTRY else Path(source).expanduser()
    return path if path.suffix == ".gguf" else None


def load_tokenizer(source: str, revision: str | None, trust_remote_code: bool) -> PreTrainedTokenizerBase:
    """The tokenizer of `source` (what `--model` accepts; of a GGUF file only its tokenizer is read), named in the
    error when it cannot be loaded."""
    try:
        gguf = _gguf(source)
        if gguf is not None:
            return _gguf_tokenizer(gguf)
        hub: dict[str, Any] = {"revision": revision} if revision else {}
        if trust_remote_code:
            hub["trust_remote_code"] = True
        return AutoTokenizer.from_pretrained(source, **hub)
    except (OSError, ValueError) as err:
        raise ServedError(f"no tokenizer for the served model from {source!r} ({first_line(err)}); name one with "
                          "--model-args tokenizer=… (a registry name, hub id, model directory or .gguf file)") from None


def _gguf_tokenizer(gguf: Path) -> PreTrainedTokenizerBase:
    """The tokenizer of a GGUF file: from the model's conversion where it was converted already, else read from the
    file once (seconds for a large vocabulary) and kept beside where the conversion would go."""
    converted = gguf_cache_path(gguf)
    for place in (converted, converted.with_name(f"{converted.name}-tokenizer")):
        if (place / "tokenizer_config.json").is_file():
            return AutoTokenizer.from_pretrained(place)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    place.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=place.parent, prefix=".tokenizer-"))
    try:
        tokenizer.save_pretrained(staging)
        os.replace(staging, place)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)  # another process saved it first, or the cache is read-only
    return tokenizer


def generation_config(source: str) -> GenerationSettings | None:
    """The generation config beside the tokenizer (its end-of-sequence ids), or None where there is none (a GGUF
    file's end-of-sequence token is its tokenizer's)."""
    try:
        if _gguf(source) is None:
            return GenerationConfig.from_pretrained(source)
    except (OSError, ValueError):
        pass
    return None


def keyed_by_id(top: Mapping[Key, float]) -> bool:
    """Whether a response's top log-probabilities name tokens by id."""
    return any(isinstance(key, int) for key in top)


class TokenMap:
    """Our vocabulary as a server's responses name it: by id, or by each token's text (invalid UTF-8 dropped, as
    text-keyed responses write it). A text several tokens decode to cannot say which it means."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase):
        self.tokenizer = tokenizer
        self.keys: dict[int, str] = {}  # how text-keyed responses name each option token (`learn`)

    @cached_property
    def _owners(self) -> dict[str, list[int]]:
        """Each text of the vocabulary and the tokens that decode to it (the whole vocabulary decoded once)."""
        owners: dict[str, list[int]] = {}
        for token, text in enumerate(self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])):
            owners.setdefault(text.replace("\ufffd", ""), []).append(token)
        return owners

    def check_unique(self, token: int) -> None:
        """The option `token` reads as no other token does in text-keyed log-probabilities (else a ServedError)."""
        ours = self.tokenizer.decode([token])
        shared = self._owners.get(ours.replace("\ufffd", ""), [])
        if len(shared) > 1:
            raise ServedError(f"the option token {token} ({ours!r}) reads the same as the tokens {shared} in the "
                              "server's log-probabilities, which name tokens by their text; use a server that names "
                              "them by id (vLLM, llama-server)")

    def learn(self, token: int, server_text: Any) -> None:
        """How text-keyed responses name the option `token`: the server's own detokenization where it gave one
        (`server_text`), else our tokenizer's."""
        self.keys[token] = server_text if isinstance(server_text, str) else self.tokenizer.decode([token])

    def options(self, top: Mapping[Key, float], label_ids: Sequence[int]) -> list[float | None]:
        """ℓ of each option in a response's top log-probabilities (None: absent): by id, else by its text as
        `learn`ed."""
        return [top[token] if token in top else top.get(self.keys.get(token, token)) for token in label_ids]

    def ids(self, top: Mapping[Key, float]) -> tuple[list[int], list[float]]:
        """A response's top log-probabilities as (token ids, values); a text several tokens share is a ServedError."""
        unknown = [key for key in top if isinstance(key, str) and len(self._owners.get(key, ())) != 1]
        if unknown:
            raise ServedError(f"the server names tokens by text and {unknown[0]!r} is the text of several tokens, so "
                              "the sampled token would be a guess; use a server that names tokens by id (vLLM, "
                              "llama-server)")
        return [key if isinstance(key, int) else self._owners[key][0] for key in top], list(top.values())
