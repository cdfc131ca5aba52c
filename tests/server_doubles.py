"""Doubles of the OpenAI-compatible servers a served model meets, each answering as its own source writes it (routes,
request fields, response shapes, refusals; docs/server-shapes.md names the source files): vLLM with and without
`logprob_token_ids` and with its top-N cap (`Vllm`), SGLang (`SGLang`), llama.cpp's llama-server (`LlamaServer`) and
llama-cpp-python's server (`LlamaCppPython`). They compute with the tiny test model in process (`Backend`: one
uncached float32 forward pass per prompt), so a run through a double can be held to a run of that model here; chat
templates render through transformers as the server does (vLLM's continuation trims under a template that trims;
SGLang and llama-server append the assistant's text raw, llama-server dropping the header of an empty one;
llama-cpp-python cannot continue a turn). `mangle` turns any of them into a faulty server, and each keeps a log of the
completion requests it answered (`asked`).

Shapes a double leaves out because the client never reads them: `text_offset` values, `bytes` (llama-server sends a
token's raw bytes; here those of its text), timings, `system_fingerprint`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import torch
from servers import LoopbackServer
from transformers import AutoModelForCausalLM, AutoTokenizer

#: What `mangle(path, request body, answer)` does to a route's JSON answer: the answer to send (bytes as they are).
Mangle = Callable[[str, dict, Any], Any]


class Backend:
    """A model directory's next-token log-softmax after token-id prompts: one uncached float32 forward pass each."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.tokenizer = AutoTokenizer.from_pretrained(directory)
        self.model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
        self.lock = threading.Lock()

    def logprobs(self, ids: list[int]) -> torch.Tensor:
        """log-softmax [V] at the position after `ids`."""
        with self.lock, torch.no_grad():
            logits = self.model(torch.tensor([ids])).logits[0, -1].float()
        return torch.log_softmax(logits, -1)[: len(self.tokenizer)]


class Refusal(Exception):
    """A request the server refuses: its HTTP status and message (and the field it names)."""

    def __init__(self, message: str, status: int = 400, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


class Double(LoopbackServer):
    """A server over `backend` serving its model under `name` (default: the model's directory, from which the client
    loads the tokenizer), its chat template `chat_template` (default: the tokenizer's). The subclass writes the routes
    (`routes`), the refusals (`error`), the 404 (`not_found`) and the completions' shapes."""

    def __init__(self, backend: Backend, name: str | None = None, chat_template: str | None = None,
                 mangle: Mangle | None = None):
        super().__init__()
        self.backend, self.tokenizer = backend, backend.tokenizer
        self.name = name or str(backend.directory)
        self.chat_template = chat_template or self.tokenizer.chat_template
        self.mangle = mangle
        self.asked: list[dict[str, Any]] = []  # each prompt completed: its ids and the request's other fields
        self.batches: list[int] = []  # the prompts of each completion request

    # ------------------------------------------------------------------ the server's parts

    def routes(self) -> dict[tuple[str, str], Callable[[dict], Any]]:
        raise NotImplementedError

    def error(self, refusal: Refusal) -> dict:
        raise NotImplementedError

    def not_found(self) -> dict:
        return {"detail": "Not Found"}  # FastAPI's (vLLM, SGLang, llama-cpp-python)

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        path = request.path.split("?")[0]
        length = int(request.headers.get("Content-Length") or 0)
        body = json.loads(request.rfile.read(length)) if length else {}
        route = self.routes().get((request.command, path))
        if path.endswith("/completions"):
            prompt = body.get("prompt")
            self.batches.append(len(prompt) if isinstance(prompt, list) and prompt and isinstance(prompt[0], list)
                                else 1)
        status, answer = 200, None
        try:
            if route is None:
                status, answer = 404, self.not_found()
            else:
                answer = route(body)
        except Refusal as refusal:
            status, answer = refusal.status, self.error(refusal)
        if self.mangle is not None:
            answer = self.mangle(path, body, answer)
        self.reply(request, status, answer if isinstance(answer, bytes) else json.dumps(answer).encode())

    # ------------------------------------------------------------------ shared by the servers

    def encode(self, text: str, special: bool = False) -> list[int]:
        return self.tokenizer(text, add_special_tokens=special)["input_ids"]

    def decode(self, token: int) -> str:
        return self.tokenizer.decode([token])

    def render(self, messages: list[dict], **flags: bool) -> str:
        """The conversation rendered with the served chat template by transformers (vLLM's rendering)."""
        return self.tokenizer.apply_chat_template(messages, tokenize=False, chat_template=self.chat_template, **flags)

    def complete(self, ids: list[int], body: dict) -> tuple[torch.Tensor, int]:
        """(log-softmax after `ids`, the greedy token under the request's `logit_bias`) for one prompt, logged."""
        logprobs = self.backend.logprobs(ids)
        biased = logprobs.clone()
        for token, bias in (body.get("logit_bias") or {}).items():
            biased[int(token)] += bias
        self.asked.append({"prompt": tuple(ids), **{k: v for k, v in body.items() if k not in ("prompt", "messages")}})
        return logprobs, int(biased.argmax())

    @staticmethod
    def top(logprobs: torch.Tensor, count: int) -> list[int]:
        """The `count` most probable tokens, most probable first (ties by id)."""
        return torch.sort(-logprobs, stable=True).indices[:count].tolist()

    def prompts(self, prompt: Any, special: bool) -> list[list[int]]:
        """The prompts of an OpenAI `prompt`: token ids, a list of them, text, a list of texts."""
        if isinstance(prompt, str):
            return [self.encode(prompt, special)]
        if prompt and all(isinstance(t, int) for t in prompt):
            return [list(prompt)]
        return [p if isinstance(p, list) else self.encode(p, special) for p in prompt]

    def usage(self, counted: int, completions: int) -> dict:
        return {"prompt_tokens": counted, "completion_tokens": completions, "total_tokens": counted + completions}

    def finish(self, token: int) -> str:
        return "stop" if token == self.tokenizer.eos_token_id else "length"


class Vllm(Double):
    """vLLM's OpenAI server (`vllm/entrypoints/openai/{completion,chat_completion}/{protocol,serving}.py`,
    `serve/tokenize`, `sampling_params.py`): token-id prompts (several per request), keys "token_id:N" with
    `return_tokens_as_token_ids`, `logprob_token_ids` where the release has it (`token_ids_field`; else ignored like
    any unknown field), at most `max_logprobs` top log-probabilities (`--max-logprobs`), /tokenize at the root taking
    a prompt or messages, the chat rendered by transformers."""

    def __init__(self, backend: Backend, token_ids_field: bool = True, max_logprobs: int = 20, **kwargs: Any):
        super().__init__(backend, **kwargs)
        self.token_ids_field, self.max_logprobs = token_ids_field, max_logprobs

    def routes(self) -> dict[tuple[str, str], Callable[[dict], Any]]:
        return {("GET", "/v1/models"): self.models, ("GET", "/version"): lambda _: {"version": "0.11.1"},
                ("POST", "/tokenize"): self.tokenize, ("POST", "/v1/completions"): self.completions,
                ("POST", "/v1/chat/completions"): self.chat}

    def error(self, refusal: Refusal) -> dict:
        return {"error": {"message": refusal.message, "type": "BadRequestError", "param": refusal.param,
                          "code": refusal.status}}

    def models(self, _: dict) -> dict:
        return {"object": "list", "data": [{"id": self.name, "object": "model", "created": 1, "owned_by": "vllm",
                                            "root": self.name, "parent": None, "max_model_len": 4096,
                                            "permission": [{"id": "modelperm-1", "object": "model_permission"}]}]}

    def conversation(self, body: dict) -> str:
        continued, opened = body.get("continue_final_message", False), body.get("add_generation_prompt", True)
        if continued and opened:
            raise Refusal("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
        return self.render(body["messages"], add_generation_prompt=opened, continue_final_message=continued)

    def tokenize(self, body: dict) -> dict:
        if "messages" in body:
            ids = self.encode(self.conversation(body), body.get("add_special_tokens", False))
        else:
            ids = self.encode(body["prompt"], body.get("add_special_tokens", True))
        return {"count": len(ids), "max_model_len": 4096, "tokens": ids, "token_strs": None}

    def listed(self, body: dict, count: int | None) -> list[int] | None:
        """The ids `logprob_token_ids` asks for where this release honours it (`check_logprobs`), else None after
        the cap check on `count` (`SamplingParams._validate_logprobs`)."""
        wanted = body.get("logprob_token_ids") if self.token_ids_field else None
        if wanted is not None:
            if count is None:
                raise Refusal("when using `logprob_token_ids`, `logprobs` must be set.")
            if len(wanted) > 128:
                raise Refusal(f"Requested logprob_token_ids of length {len(wanted)}, which is greater than max "
                              "allowed: 128")
            return list(wanted)
        if count is not None and count > self.max_logprobs:
            raise Refusal(f"Requested sample logprobs of {count}, which is greater than max allowed: "
                          f"{self.max_logprobs} (parameter=logprobs, value={count})", param="logprobs")
        return None

    def key(self, token: int, body: dict) -> str:
        return f"token_id:{token}" if body.get("return_tokens_as_token_ids") else self.decode(token)

    def position(self, logprobs: torch.Tensor, token: int, wanted: list[int]) -> dict[int, float]:
        """The position's {id: ℓ}: the sampled token first, then the asked ones; −inf clamped to −9999."""
        return {t: max(float(logprobs[t]), -9999.0) for t in [token, *wanted]}

    def completions(self, body: dict) -> dict:
        count = body.get("logprobs")
        listed = self.listed(body, count)
        choices, counted = [], 0
        for index, ids in enumerate(self.prompts(body["prompt"], special=True)):
            logprobs, token = self.complete(ids, body)
            counted += len(ids)
            wanted = listed if listed is not None else self.top(logprobs, count or 0)
            top = {self.key(t, body): value for t, value in self.position(logprobs, token, wanted).items()}
            choices.append({"index": index, "text": self.decode(token),
                            "logprobs": None if count is None else {
                                "text_offset": [0], "token_logprobs": [float(logprobs[token])],
                                "tokens": [self.key(token, body)], "top_logprobs": [top]},
                            "finish_reason": self.finish(token), "stop_reason": None, "prompt_logprobs": None})
        return {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": self.name, "choices": choices,
                "usage": self.usage(counted, len(choices)), "system_fingerprint": None}

    def chat(self, body: dict) -> dict:
        if body.get("top_logprobs") and not body.get("logprobs"):
            raise Refusal("when using `top_logprobs`, `logprobs` must be set to true.")
        ids = self.encode(self.conversation(body))
        count = body.get("top_logprobs") or 0
        listed = self.listed(body, count if body.get("logprobs") else None)
        logprobs, token = self.complete(ids, body)
        position = self.position(logprobs, token, listed if listed is not None else self.top(logprobs, count))
        entries = list(position.items())[: None if listed is not None else count]
        content = [{"token": self.key(token, body), "logprob": position[token],
                    "bytes": list(self.decode(token).encode()),
                    "top_logprobs": [{"token": self.key(t, body), "logprob": v, "bytes": list(self.decode(t).encode())}
                                     for t, v in entries]}]
        return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": self.name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": self.decode(token)},
                             "logprobs": {"content": content} if body.get("logprobs") else None,
                             "finish_reason": self.finish(token)}],
                "usage": self.usage(len(ids), 1)}


class SGLang(Double):
    """SGLang's OpenAI server (`python/sglang/srt/entrypoints/openai/{protocol,serving_completions,serving_chat}.py`,
    `utils.to_openai_style_logprobs`, `http_server.py`): token-id prompts (several per request), top log-probabilities
    keyed by text (a text several tokens share kept once), at most the vocabulary, flat errors, /tokenize and
    /v1/tokenize taking text only, a continued assistant message appended raw to the rendered conversation."""

    def routes(self) -> dict[tuple[str, str], Callable[[dict], Any]]:
        return {("GET", "/v1/models"): self.models, ("POST", "/tokenize"): self.tokenize,
                ("POST", "/v1/tokenize"): self.tokenize, ("POST", "/v1/completions"): self.completions,
                ("POST", "/v1/chat/completions"): self.chat}

    def error(self, refusal: Refusal) -> dict:
        return {"object": "error", "message": refusal.message, "type": "BadRequest", "param": refusal.param,
                "code": refusal.status}

    def models(self, _: dict) -> dict:
        return {"object": "list", "data": [{"id": self.name, "object": "model", "created": 1, "owned_by": "sglang",
                                            "root": self.name, "parent": None, "max_model_len": 4096}]}

    def tokenize(self, body: dict) -> dict:
        if "prompt" not in body:
            raise Refusal("1 validation error for TokenizeRequest\nprompt\n  Field required")
        ids = self.encode(body["prompt"], body.get("add_special_tokens", True))
        return {"tokens": ids, "count": len(ids), "max_model_len": 4096}

    def checked_count(self, count: int) -> int:
        if not 0 <= count <= len(self.tokenizer):
            raise Refusal(f"top_logprobs_num must be in [0, {len(self.tokenizer)}]")
        return count

    def completions(self, body: dict) -> dict:
        count = self.checked_count(body.get("logprobs") or 0)
        choices, counted = [], 0
        for index, ids in enumerate(self.prompts(body["prompt"], special=True)):
            logprobs, token = self.complete(ids, body)
            counted += len(ids)
            top = {self.decode(t): float(logprobs[t]) for t in self.top(logprobs, count)}
            choices.append({"index": index, "text": self.decode(token),
                            "logprobs": {"text_offset": [-1], "token_logprobs": [float(logprobs[token])],
                                         "tokens": [self.decode(token)], "top_logprobs": [top]},
                            "finish_reason": self.finish(token), "matched_stop": None})
        return {"id": "1", "object": "text_completion", "created": 1, "model": self.name, "choices": choices,
                "usage": self.usage(counted, len(choices)) | {"prompt_tokens_details": None}}

    def chat(self, body: dict) -> dict:
        messages = body["messages"]
        final = messages[-1]["content"] if body.get("continue_final_message") and messages[-1]["role"] == (
            "assistant") else None
        rest = messages[:-1] if final is not None else messages
        ids = self.encode(self.render(rest, add_generation_prompt=True) + (final or ""))
        count = self.checked_count(body.get("top_logprobs") or 0)
        logprobs, token = self.complete(ids, body)

        def entry(t: int) -> dict:
            return {"token": self.decode(t), "bytes": list(self.decode(t).encode()), "logprob": float(logprobs[t])}

        content = [entry(token) | {"top_logprobs": [entry(t) for t in self.top(logprobs, count)]}]
        return {"id": "1", "object": "chat.completion", "created": 1, "model": self.name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": self.decode(token)},
                             "logprobs": {"content": content}, "finish_reason": self.finish(token)}],
                "usage": self.usage(len(ids), 1)}


class LlamaServer(Double):
    """llama.cpp's llama-server (`tools/server/server-{context,common,task}.cpp`, `server.cpp`'s routes): token-id
    prompts (a list of lists = several prompts, its usage the first one's), every top log-probability with its `id`
    in the chat shape on /v1/completions too, no cap, /tokenize (`content`) and /apply-template at the root, no
    /v1/tokenize, /props; a continued assistant message appended raw to the rendered conversation, an empty one
    rendered without the assistant's header (measured on the real server)."""

    def routes(self) -> dict[tuple[str, str], Callable[[dict], Any]]:
        return {("GET", "/v1/models"): self.models, ("GET", "/models"): self.models, ("GET", "/props"): self.props,
                ("POST", "/tokenize"): self.tokenize, ("POST", "/apply-template"): self.apply_template,
                ("POST", "/v1/completions"): self.completions, ("POST", "/v1/chat/completions"): self.chat}

    def error(self, refusal: Refusal) -> dict:
        return {"error": {"code": refusal.status, "message": refusal.message, "type": "invalid_request_error"}}

    def not_found(self) -> dict:
        return {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}

    def models(self, _: dict) -> dict:
        return {"models": [{"name": self.name, "model": self.name, "type": "model"}], "object": "list",
                "data": [{"id": self.name, "aliases": [], "tags": [], "object": "model", "created": 1,
                          "owned_by": "llamacpp", "meta": {"vocab_type": 2, "n_vocab": len(self.tokenizer),
                                                           "n_ctx": 2048, "n_ctx_train": 4096}}]}

    def props(self, _: dict) -> dict:
        return {"default_generation_settings": {"n_ctx": 2048}, "total_slots": 1, "model_path": self.name,
                "chat_template": self.chat_template, "build_info": "b1-double"}

    def tokenize(self, body: dict) -> dict:
        if "content" not in body:
            return {"tokens": []}
        return {"tokens": self.encode(body["content"], body.get("add_special", False))}

    def conversation(self, body: dict) -> str:
        messages = body["messages"]
        if body.get("continue_final_message") and body.get("add_generation_prompt"):
            raise Refusal("Cannot set both add_generation_prompt and continue_final_message to true.")
        if messages[-1]["role"] == "assistant":  # continued (prefill): the rest, its generation prompt, the text raw
            final = messages[-1]["content"]
            return self.render(messages[:-1], add_generation_prompt=bool(final)) + final
        return self.render(messages, add_generation_prompt=body.get("add_generation_prompt", True))

    def apply_template(self, body: dict) -> dict:
        return {"prompt": self.conversation(body)}

    def entry(self, logprobs: torch.Tensor, token: int) -> dict:
        text = self.decode(token).replace("\ufffd", "")  # the piece with an incomplete UTF-8 sequence cut off
        return {"id": token, "token": text, "bytes": list(text.encode()), "logprob": float(logprobs[token])}

    def choice(self, index: int, ids: list[int], body: dict, count: int, chat: bool = False) -> dict:
        logprobs, token = self.complete(ids, body)
        probs = None
        if count > 0:
            top = [self.entry(logprobs, t) for t in self.top(logprobs, min(count, len(self.tokenizer)))]
            probs = {"content": [self.entry(logprobs, token) | {"top_logprobs": top}]}
        text = {"message": {"role": "assistant", "content": self.decode(token)}} if chat else {
            "text": self.decode(token)}
        return {**text, "index": index, "logprobs": probs, "finish_reason": self.finish(token)}

    def completions(self, body: dict) -> dict:
        if "prompt" not in body:
            raise Refusal("[json.exception.out_of_range.403] key 'prompt' not found")
        prompts = self.prompts(body["prompt"], special=True)
        count = body.get("n_probs", body.get("logprobs")) or 0
        choices = [self.choice(i, ids, body, count) for i, ids in enumerate(prompts)]
        return {"choices": choices, "created": 1, "model": self.name, "system_fingerprint": "b1-double",
                "object": "text_completion", "usage": self.usage(len(prompts[0]), 1), "id": "chatcmpl-1"}

    def chat(self, body: dict) -> dict:
        if body.get("top_logprobs") and not body.get("logprobs"):
            raise Refusal("top_logprobs requires logprobs to be set to true")
        ids = self.encode(self.conversation(body), special=True)
        count = (body.get("top_logprobs") or 20) if body.get("logprobs") else 0
        return {"choices": [self.choice(0, ids, body, count, chat=True)], "created": 1, "model": self.name,
                "object": "chat.completion", "usage": self.usage(len(ids), 1), "id": "chatcmpl-1"}


class LlamaCppPython(Double):
    """llama-cpp-python's server (`llama_cpp/server/{app,types,errors}.py`, `llama.py`): text prompts only (a token-id
    prompt fails validation, 422), top log-probabilities keyed by text plus the sampled token, none when the generated
    token ends the sequence, /extras/tokenize and /extras/detokenize, errors as 500; its chat cannot continue an
    assistant's message (it closes it and opens a new turn)."""

    def routes(self) -> dict[tuple[str, str], Callable[[dict], Any]]:
        return {("GET", "/v1/models"): self.models, ("POST", "/extras/tokenize"): self.tokenize,
                ("POST", "/extras/detokenize"): lambda body: {"text": self.tokenizer.decode(body["tokens"])},
                ("POST", "/v1/completions"): self.completions, ("POST", "/v1/chat/completions"): self.chat}

    def error(self, refusal: Refusal) -> dict:
        return {"error": {"message": refusal.message, "type": "internal_server_error", "param": None, "code": None}}

    def models(self, _: dict) -> dict:
        return {"object": "list", "data": [{"id": self.name, "object": "model", "owned_by": "me", "permissions": []}]}

    def tokenize(self, body: dict) -> dict:
        return {"tokens": self.encode(body["input"], special=True)}

    def one(self, ids: list[int], body: dict, count: int) -> tuple[str, dict | None, str]:
        logprobs, token = self.complete(ids, body)
        if token == self.tokenizer.eos_token_id:
            return "", {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}, "stop"
        top = {self.decode(t).replace("\ufffd", ""): float(logprobs[t]) for t in self.top(logprobs, count)}
        top[self.decode(token).replace("\ufffd", "")] = float(logprobs[token])
        return self.decode(token), {"tokens": [self.decode(token)], "text_offset": [0],
                                    "token_logprobs": [float(logprobs[token])], "top_logprobs": [top]}, "length"

    def completions(self, body: dict) -> dict:
        if not isinstance(body.get("prompt"), str):
            raise Refusal("Input should be a valid string", status=422)
        ids = self.encode(body["prompt"], special=True)
        text, probs, finish = self.one(ids, body, body.get("logprobs") or 0)
        return {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": self.name,
                "choices": [{"text": text, "index": 0, "logprobs": probs, "finish_reason": finish}],
                "usage": self.usage(len(ids), 1)}

    def chat(self, body: dict) -> dict:
        ids = self.encode(self.render(body["messages"], add_generation_prompt=True), special=True)
        text, probs, finish = self.one(ids, body, body.get("top_logprobs") or 0)
        content = None if probs is None or not probs["top_logprobs"] else [
            {"token": probs["tokens"][0], "logprob": probs["token_logprobs"][0], "bytes": None,
             "top_logprobs": [{"token": k, "logprob": v, "bytes": None} for k, v in probs["top_logprobs"][0].items()]}]
        return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": self.name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "logprobs": {"content": content}, "finish_reason": finish}],
                "usage": self.usage(len(ids), 1)}


#: The doubles by the name a parametrized test shows: (class, keyword arguments).
DOUBLES: dict[str, tuple[type[Double], dict[str, Any]]] = {
    "vllm": (Vllm, {}),
    "vllm-without-logprob_token_ids": (Vllm, {"token_ids_field": False, "max_logprobs": 258}),
    "sglang": (SGLang, {}),
    "llama-server": (LlamaServer, {}),
    "llama-cpp-python": (LlamaCppPython, {}),
}


def double(kind_name: str, backend: Backend, **kwargs: Any) -> Double:
    """The double `kind_name` of `DOUBLES` over `backend` (`kwargs` added to or replacing its own)."""
    kind, own = DOUBLES[kind_name]
    return kind(backend, **(own | kwargs))


#: A Llama-3-style chat template line for the tiny model's turns: the message content trimmed (`| trim`).
TRIMMING_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] | trim + "
    "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
