"""`--model openai:BASE_URL`: which spec names a model behind an inference server, its API root, and the error every
part of a served model raises."""

from __future__ import annotations

from beliefdrift.errors import UserError

#: `--model openai:BASE_URL` selects a served model (the prefix style of `hf:` datasets).
SERVED_PREFIX = "openai:"
#: Settings of a local model that a served run's identity leaves out (`runs.identity`): they change no number there.
SERVED_SETTINGS = ("dtype", "device", "attn_implementation", "model_args")


class ServedError(UserError):
    """The server cannot serve the run as asked: unreachable, another model, no or too few log-probabilities, …"""


def is_served(spec: str) -> bool:
    """Whether `--model spec` names a model behind an inference server."""
    return spec.startswith(SERVED_PREFIX)


def base_url(spec: str) -> str:
    """The server's OpenAI API root of `openai:BASE_URL` (e.g. http://127.0.0.1:8000/v1), without a trailing /."""
    url = spec.removeprefix(SERVED_PREFIX).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ServedError(f"--model {spec}: expected openai:http://HOST:PORT/v1 (the server's OpenAI API root)")
    return url
