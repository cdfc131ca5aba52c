"""`--model-args` of a served model: which API dialect, which tokenizer, and how requests are made (lm-eval's
`local-completions` names accepted as aliases: `ALIASES`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from beliefdrift.backend.served.chat import Chat
from beliefdrift.backend.served.completions import Completions
from beliefdrift.credentials import environment_secret, register_secret
from beliefdrift.errors import UserError

#: `--model-args api=…`: the dialect of each API a server may answer the steps' requests with.
DIALECTS: dict[str, type[Completions]] = {dialect.api: dialect for dialect in (Completions, Chat)}
#: lm-eval's names (`local-completions`' model_args) → ours; `max_retries` counts attempts there, retries here.
ALIASES = {"num_concurrent": "concurrency", "max_retries": "retries"}
#: `--model-args tokenizer_backend=…` (lm-eval's): where prompts are tokenized. huggingface: here, with the tokenizer
#: `tokenizer` names (transformers or a .gguf file); remote: on the server, accepted here and refused at run start
#: (`model.served_options`: a server's tokenize routes give no chat template, end-of-sequence ids or vocabulary size).
TOKENIZER_BACKENDS = ("huggingface", "remote")
#: `--model-args header.NAME=VALUE`: a custom header sent with every request (lm-eval's `header` mapping).
HEADER_PREFIX = "header."
#: An HTTP header's name (RFC 9110's token); its value: printable ASCII and spaces, on one line.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEADER_VALUE = re.compile(r"[ -~]*")
#: Custom headers whose value is a credential (masked in every text, `credentials.register_secret`).
_SECRET_HEADER = re.compile(r"auth|key|token|secret|cookie|pass|signature|credential", re.IGNORECASE)
#: The options that may be 0 (the rest of the numbers are at least 1).
_MAY_BE_ZERO = ("retries", "backoff")


@dataclass(frozen=True)
class ServerOptions:
    """`--model-args` of a served model (lm-eval's `local-completions` names where they fit: `tokenizer`, `timeout`,
    `verify_certificate`, `ca_cert_path`, `header`, `tokenizer_backend`, and `ALIASES`). Only `served_model`,
    `tokenizer` and `api` change a number; the rest is how requests are made."""

    served_model: str | None = None  # the name the server serves it under (unset: the one /v1/models lists)
    api: str = "completions"  # or "chat": /v1/chat/completions, the server applying the model's chat template
    tokenizer: str | None = None  # registry name, hub id, directory or .gguf (unset: the served model's name)
    tokenizer_backend: str = "huggingface"  # where prompts are tokenized (`TOKENIZER_BACKENDS`)
    api_key_env: str | None = None  # the environment variable holding the API key (never stored)
    header: tuple[tuple[str, str], ...] = ()  # custom headers sent with every request (never stored)
    verify_certificate: bool = True  # check an https server's certificate
    ca_cert_path: str | None = None  # a PEM file of the certificate authorities to trust (unset: the system's)
    concurrency: int = 16  # requests in flight at once (× batch_size prompts: 256, a GPU server's batch)
    batch_size: int = 16  # token-id prompts per request, where the server takes a list of them
    timeout: float = 300.0  # seconds one attempt of a request may take, from sending it to its last byte
    retries: int = 5  # further attempts after a 429, 5xx, timeout or dropped connection
    backoff: float = 0.5  # seconds before the first retry, doubling up to 30
    max_response_bytes: int = 1 << 26  # the largest response body read, compressed and decompressed (64 MiB)
    logprobs: int = 20  # top log-probabilities asked for first (raised while an option is missing)
    max_logprobs: int | None = None  # the most top log-probabilities the server gives (unset: the vocabulary)

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> ServerOptions:
        """The options in `args` (`config.parse_model_args`, or a mapping from Python: lm-eval's `header` as a
        mapping); lm-eval's names in `ALIASES` read as ours. An unknown key, a key given twice, or a value of the
        wrong kind is a UserError naming it."""
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        headers: dict[str, str] = {}
        for given, value in args.items():
            key = ALIASES.get(given, given)
            if key in values:
                spellings = ", ".join(k for k in args if ALIASES.get(k, k) == key)
                raise UserError(f"--model-args {spellings}: the same option ({key}) given twice; give it once")
            if key == "header" or key.startswith(HEADER_PREFIX):
                headers |= _headers(key, value)
                continue
            if key not in known:
                raise UserError(f"--model-args {given}: not an option of a served model; expected "
                                f"{', '.join(known)}, {HEADER_PREFIX}NAME, or lm-eval's {', '.join(ALIASES)}")
            values[key] = _value(given, key, str(known[key].type).split(" | ")[0], value)
        if "retries" in values and "max_retries" in args:
            values["retries"] -= 1  # lm-eval's max_retries counts every attempt
        if headers:
            values["header"] = tuple(sorted(headers.items()))
        return cls(**values)

    @property
    def dialect(self) -> type[Completions]:
        """The API dialect `api` names."""
        return DIALECTS[self.api]

    def headers(self) -> dict[str, str]:
        """The headers sent with every request: the custom ones (`header`) and an Authorization header from the
        variable `api_key_env` names (`credentials.environment_secret`, which checks and registers it)."""
        headers = dict(self.header)
        if self.api_key_env:
            if any(name.lower() == "authorization" for name in headers):
                raise UserError(f"--model-args api_key_env={self.api_key_env} and {HEADER_PREFIX}Authorization: give "
                                "the key one way")
            key = environment_secret(self.api_key_env, f"--model-args api_key_env={self.api_key_env}")
            headers["Authorization"] = f"Bearer {key}"
        return headers


def _value(given: str, key: str, kind: str, value: Any) -> Any:
    """`value` of the option `key` (named `given` in `--model-args`) as its `kind` ("str", "int", "float", "bool"),
    checked; else a UserError naming it and what was expected."""
    if key == "api" and value not in DIALECTS:
        raise UserError(f"--model-args api={value}: expected one of {', '.join(DIALECTS)}")
    if key == "tokenizer_backend" and value not in TOKENIZER_BACKENDS:
        raise UserError(f"--model-args tokenizer_backend={value}: expected one of {', '.join(TOKENIZER_BACKENDS)} "
                        "(beliefdrift needs the served model's own tokenizer)")
    if kind == "str":
        return str(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise UserError(f"--model-args {given}={value}: expected true or false")
        return value
    least = 1 if given == "max_retries" or key not in _MAY_BE_ZERO else 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind == "int" and value != int(value)) \
            or not least <= value < float("inf"):
        raise UserError(f"--model-args {given}={value}: expected {'an integer' if kind == 'int' else 'a number'} "
                        f"≥ {least}")
    return int(value) if kind == "int" else float(value)


def _headers(key: str, value: Any) -> dict[str, str]:
    """The custom headers `--model-args header.NAME=VALUE` (or lm-eval's `header` mapping) gives, checked: a name
    HTTP allows, a value on one line of printable ASCII; a value that is a credential by its header's name is
    registered (`credentials.register_secret`)."""
    if key == "header":
        if not isinstance(value, Mapping):
            raise UserError("--model-args header: expected header.NAME=VALUE (or, from Python, a mapping of names to "
                            "values)")
        pairs = {str(name): value[name] for name in value}
    else:
        pairs = {key.removeprefix(HEADER_PREFIX): value}
    for name, text in pairs.items():
        if not _HEADER_NAME.fullmatch(name):
            raise UserError(f"--model-args {HEADER_PREFIX}{name}: not an HTTP header name (letters, digits and "
                            "!#$%&'*+-.^_`|~)")
        if _SECRET_HEADER.search(name):
            register_secret(str(text))
        if not isinstance(text, (str, int, float)) or not _HEADER_VALUE.fullmatch(str(text)):
            raise UserError(f"--model-args {HEADER_PREFIX}{name}: its value is not one line of printable ASCII (the "
                            "value is not shown)")
    return {name: str(text) for name, text in pairs.items()}
