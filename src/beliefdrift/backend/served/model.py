"""A model behind an OpenAI-compatible inference server as a `LanguageModel` (`ServedModel`), connected and checked
(`connect`), and what pins it in a run's identity (`served_identity`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from beliefdrift.backend.loading import LanguageModel
from beliefdrift.backend.served.endpoint import Endpoint, server_facts
from beliefdrift.backend.served.options import ServerOptions
from beliefdrift.backend.served.spec import base_url
from beliefdrift.backend.served.transport import Transport
from beliefdrift.errors import UserError


@dataclass
class ServedModel(LanguageModel):
    """A `LanguageModel` whose `model` is an `Endpoint`: θ arrives on the CPU in float32 (the server's
    log-probabilities), where the answers are drawn."""

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    @property
    def default_batch_questions(self) -> int:
        """16: the paths of several questions in flight at once keep the server's batches full."""
        return 16


def connect(spec: str, model_args: Mapping[str, Any] | None = None, revision: str | None = None,
            trust_remote_code: bool = False) -> ServedModel:
    """The model served at `openai:BASE_URL`, checked: reachable, serving the model named (or exactly one), giving
    log-probabilities, reading our tokens (`Endpoint`)."""
    options = ServerOptions.from_args(model_args or {})
    endpoint = Endpoint(spec, options, revision, trust_remote_code)
    return ServedModel(model=endpoint, tokenizer=endpoint.tokenizer, name=spec)  # type: ignore[arg-type]


def served_model(options: Any) -> ServedModel:
    """`connect` for a command's settings (a `config.ModelOptions`); the settings that need a local model
    (`--compile`, `--cuda-graphs`, `--adapter`) are refused in one line."""
    for flag in ("compile", "cuda_graphs", "adapter"):
        if getattr(options, flag, None):
            raise UserError(f"--{flag.replace('_', '-')}: --model {options.model} runs on its server; "
                            + ("serve the adapter there (vLLM: --lora-modules) and name it with --model-args "
                               "served_model=NAME" if flag == "adapter" else "it has no local forward pass"))
    return connect(options.model, **options.pretrained_kwargs())


def served_identity(spec: str, model_args: Mapping[str, Any]) -> dict[str, Any]:
    """What a served run's identity records instead of dtype, device and from_pretrained keywords: the endpoint, the
    served model's name, the tokenizer's source and the server's facts (`server_facts`; never the API key)."""
    options = ServerOptions.from_args(model_args)
    transport = Transport(base_url(spec), options)
    try:
        name, facts = transport.run(server_facts(transport, options.served_model))
    finally:
        transport.close()
    api = {"api": options.api} if options.api != "completions" else {}
    return {"model": spec, "served_model": name, "tokenizer": options.tokenizer or name, **api, "server": facts}
