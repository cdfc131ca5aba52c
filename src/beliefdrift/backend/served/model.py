"""A model behind an OpenAI-compatible inference server as a `LanguageModel` (`ServedModel`), connected and checked
(`connect`), and what pins it in a run's identity (`served_identity`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch
from transformers import PreTrainedTokenizerBase

from beliefdrift.backend.answer_tokens import AnswerTokens
from beliefdrift.backend.model import GenerationSettings, LanguageModel
from beliefdrift.backend.served.endpoint import Endpoint, server_facts
from beliefdrift.backend.served.options import ServerOptions
from beliefdrift.backend.served.paths import ServedBatch, ServedRollouts
from beliefdrift.backend.served.spec import SERVED_PREFIX, ServedError, base_url, named_api
from beliefdrift.backend.served.transport import Transport
from beliefdrift.errors import UserError


@dataclass
class ServedModel(LanguageModel):
    """A `LanguageModel` behind a server (`model`, its `Endpoint`): θ arrives on the CPU in float32 (the server's
    log-probabilities), where the answers are drawn; it gives no hidden states and runs no local forward pass."""

    model: Endpoint
    tokenizer: PreTrainedTokenizerBase
    name: str

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

    @property
    def context_length(self) -> int | None:
        """The server's context where it says (vLLM's `max_model_len`)."""
        return self.model.config.max_position_embeddings

    @property
    def generation_config(self) -> GenerationSettings | None:
        return self.model.generation_config

    @property
    def hidden_states(self) -> bool:
        return False

    def prefill(self, tokens: AnswerTokens) -> ServedBatch:
        """One path holding the prompt (θ fetched when first read)."""
        return ServedBatch(self.model, tokens, [tokens], [tokens.prompt_ids])

    def rollouts(self, prompt_ids: Sequence[int]) -> ServedRollouts:
        """One rollout holding the prompt; a text prompt is checked against the server's tokenization once."""
        self.model.check_rollout_prompt(prompt_ids)
        return ServedRollouts(self.model, [tuple(prompt_ids)])

    def prepared(self, compile: bool = False, cuda_graphs: bool | None = None) -> ServedModel:
        """This model: `--compile` and `--cuda-graphs` are refused (its server runs the passes)."""
        for flag, value in (("compile", compile), ("cuda_graphs", cuda_graphs)):
            if value:
                raise UserError(_runs_on_its_server(flag, self.name))
        return self

    def identity(self) -> dict[str, Any]:
        """What pins it in a run's identity (`served_identity`), from the connection it has, with how the server is
        held to reading our tokens, which only a connection knows (`Endpoint.prompt_check`)."""
        return _served_entries(self.name, self.model.options, self.model.name, self.model.facts) | {
            "prompts": self.model.prompt_check}


def _runs_on_its_server(flag: str, spec: str) -> str:
    """Why `--flag` (a setting of a local model) is refused for the served model `spec`."""
    return (f"--{flag.replace('_', '-')}: --model {spec} runs on its server; "
            + ("serve the adapter there (vLLM: --lora-modules) and name it with --model-args served_model=NAME"
               if flag == "adapter" else "it has no local forward pass"))


def connect(spec: str, model_args: Mapping[str, Any] | None = None, revision: str | None = None,
            trust_remote_code: bool = False) -> ServedModel:
    """The model served at `openai:BASE_URL`, checked: reachable, serving the model named (or exactly one), giving
    log-probabilities, reading our tokens (`Endpoint`)."""
    options = served_options(spec, model_args or {})
    endpoint = Endpoint(spec, options, revision, trust_remote_code)
    return ServedModel(model=endpoint, tokenizer=endpoint.tokenizer, name=spec)


def served_options(spec: str, model_args: Mapping[str, Any]) -> ServerOptions:
    """The `--model-args` of the model served at `spec` (`ServerOptions.from_args`), `api` read from the endpoint
    that `spec` names in full (lm-eval's `base_url`: `…/v1/chat/completions` is `api=chat`)."""
    options = ServerOptions.from_args(model_args)
    named = named_api(spec)
    if named is not None and "api" in model_args and options.api != named:
        raise ServedError(f"--model {spec} names the {named} endpoint and --model-args api={options.api} another; "
                          "give one")
    if options.tokenizer_backend == "remote":
        raise ServedError("--model-args tokenizer_backend=remote: tokenizing on the server is not implemented: a "
                          "server's tokenize routes turn text into ids and back, but beliefdrift also needs the "
                          "model's chat template, end-of-sequence ids and vocabulary size; give the served model's "
                          "tokenizer with --model-args tokenizer=… (a hub id, directory or .gguf: only its tokenizer "
                          "is read)")
    return replace(options, api=named) if named else options


class ModelSettings(Protocol):
    """What `served_model` reads of a command's settings (a `config.ModelOptions`, which `backend/served/` does not
    import): the `--model` spec and `load_model`'s keywords."""

    @property
    def model(self) -> str: ...

    def pretrained_kwargs(self) -> dict[str, Any]: ...


def served_model(options: ModelSettings) -> ServedModel:
    """`connect` for a command's settings; the settings that need a local model (`--compile`, `--cuda-graphs`,
    `--adapter`, where the command has them) are refused in one line."""
    for flag in ("compile", "cuda_graphs", "adapter"):
        if getattr(options, flag, None):
            raise UserError(_runs_on_its_server(flag, options.model))
    return connect(options.model, **options.pretrained_kwargs())


def served_identity(spec: str, model_args: Mapping[str, Any]) -> dict[str, Any]:
    """What a served run's identity records instead of dtype, device and from_pretrained keywords: the endpoint, the
    served model's name, the tokenizer's source and the server's facts (`server_facts`; never the API key)."""
    options = served_options(spec, model_args)
    transport = Transport(base_url(spec), options)
    try:
        name, facts = transport.run(server_facts(transport, options.served_model))
    finally:
        transport.close()
    return _served_entries(spec, options, name, facts)


def _served_entries(spec: str, options: ServerOptions, name: str, facts: dict[str, Any]) -> dict[str, Any]:
    """The run identity's entries of the model `name` served at `spec` (`facts`: `server_facts`): the server's API
    root however `spec` spells it (`…/v1/`, `…/v1/completions`), so that each spelling names one run."""
    api = {"api": options.api} if options.api != "completions" else {}
    return {"model": SERVED_PREFIX + base_url(spec), "served_model": name, "tokenizer": options.tokenizer or name,
            **api, "server": facts}
