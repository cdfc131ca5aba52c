"""`--model-args` of a served model: which API dialect, which tokenizer, and how requests are made."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from beliefdrift.backend.served.chat import Chat
from beliefdrift.backend.served.completions import Completions
from beliefdrift.backend.served.spec import ServedError
from beliefdrift.errors import UserError

#: `--model-args api=…`: the dialect of each API a server may answer the steps' requests with.
DIALECTS: dict[str, type[Completions]] = {dialect.api: dialect for dialect in (Completions, Chat)}


@dataclass(frozen=True)
class ServerOptions:
    """`--model-args` of a served model (lm-eval's `local-completions` names where they fit: `tokenizer`,
    `timeout`). Only `served_model`, `tokenizer` and `api` change a number; the rest is how requests are made."""

    served_model: str | None = None  # the name the server serves it under (unset: the one /v1/models lists)
    api: str = "completions"  # or "chat": /v1/chat/completions, the server applying the model's chat template
    tokenizer: str | None = None  # registry name, hub id, directory or .gguf (unset: the served model's name)
    api_key_env: str | None = None  # the environment variable holding the API key (never stored)
    concurrency: int = 16  # requests in flight at once (× batch_size prompts: 256, a GPU server's batch)
    batch_size: int = 16  # token-id prompts per request, where the server takes a list of them
    timeout: float = 300.0  # seconds per request
    retries: int = 5  # further attempts after a 429, 5xx, timeout or dropped connection
    backoff: float = 0.5  # seconds before the first retry, doubling up to 30
    logprobs: int = 20  # top log-probabilities asked for first (raised while an option is missing)
    max_logprobs: int | None = None  # the most top log-probabilities the server gives (unset: the vocabulary)

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> ServerOptions:
        """The options in `args` (`config.parse_model_args`); an unknown key or a value of the wrong kind is a
        UserError naming it."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(args) - set(known))
        if unknown:
            raise UserError(f"--model-args {', '.join(unknown)}: not an option of a served model; expected "
                            f"{', '.join(known)}")
        values: dict[str, Any] = {}
        for key, value in args.items():
            kind = str(known[key].type).split(" | ")[0]
            if key == "api" and value not in DIALECTS:
                raise UserError(f"--model-args api={value}: expected one of {', '.join(DIALECTS)}")
            if kind == "str":
                values[key] = str(value)
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or (kind == "int" and value != int(
                    value)) or value < (0 if key in ("retries", "backoff") else 1):
                limit = "≥ 0" if key in ("retries", "backoff") else "≥ 1"
                raise UserError(f"--model-args {key}={value}: expected {'an integer' if kind == 'int' else 'a number'} "
                                f"{limit}")
            else:
                values[key] = int(value) if kind == "int" else float(value)
        return cls(**values)

    @property
    def dialect(self) -> type[Completions]:
        """The API dialect `api` names."""
        return DIALECTS[self.api]

    def headers(self) -> dict[str, str]:
        """The Authorization header from the variable `api_key_env` names (none without it)."""
        if not self.api_key_env:
            return {}
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ServedError(f"--model-args api_key_env={self.api_key_env}: that environment variable is not set")
        return {"Authorization": f"Bearer {key}"}
