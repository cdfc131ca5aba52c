"""`--model openai:BASE_URL`: which spec names a model behind an inference server, its API root, and the error every
part of a served model raises."""

from __future__ import annotations

import urllib.parse

from beliefdrift.credentials import redact
from beliefdrift.errors import UserError

#: `--model openai:BASE_URL` selects a served model (the prefix style of `hf:` datasets).
SERVED_PREFIX = "openai:"
#: Settings of a local model that a served run's identity leaves out (`runs.identity`): they change no number there.
SERVED_SETTINGS = ("dtype", "device", "attn_implementation", "model_args")
#: The endpoints a base URL may name in full (lm-eval's `base_url` is one), and the API each is (`--model-args api`).
ENDPOINTS = {"/chat/completions": "chat", "/completions": "completions"}


class ServedError(UserError):
    """The server cannot serve the run as asked: unreachable, another model, no or too few log-probabilities, …; its
    text never holds a credential (`credentials.redact`: a URL's key, a registered API key a server echoed)."""

    def __init__(self, message: str):
        super().__init__(redact(message))


def is_served(spec: str) -> bool:
    """Whether `--model spec` names a model behind an inference server."""
    return spec.startswith(SERVED_PREFIX)


def base_url(spec: str) -> str:
    """The server's OpenAI API root of `openai:BASE_URL` (e.g. http://127.0.0.1:8000/v1), without a trailing / and
    without an endpoint that BASE_URL names in full (`…/v1/completions`, `…/v1/chat/completions`: `ENDPOINTS`), its
    query (where a key may travel) kept."""
    parts = _url_parts(spec)
    path = parts.path.rstrip("/")
    path = next((path.removesuffix(end) for end in ENDPOINTS if path.endswith(end)), path).rstrip("/")
    return urllib.parse.urlunsplit(parts._replace(path=path))


def named_api(spec: str) -> str | None:
    """The API (`--model-args api`) whose endpoint `openai:BASE_URL` names in full (`ENDPOINTS`), else None."""
    path = _url_parts(spec).path.rstrip("/")
    return next((api for end, api in ENDPOINTS.items() if path.endswith(end)), None)


def _url_parts(spec: str) -> urllib.parse.SplitResult:
    """The parts of BASE_URL in `openai:BASE_URL`, checked: http or https, a host, a port in 1-65535, no fragment."""
    try:
        parts = urllib.parse.urlsplit(spec.removeprefix(SERVED_PREFIX))
        port = parts.port  # a port out of 0-65535, or not a number, raises here
    except ValueError as err:
        raise ServedError(f"--model {spec}: not a URL ({err}); expected openai:http://HOST:PORT/v1") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0 or parts.fragment:
        raise ServedError(f"--model {spec}: expected openai:http://HOST:PORT/v1 (the server's OpenAI API root)")
    return parts
