"""Models behind an OpenAI-compatible inference server (vLLM, SGLang, llama.cpp): `--model openai:BASE_URL`.

The server computes, we sample. For a path whose context is the token ids x (prompt, then its answers so far), one
completion request of one token returns the server's log-probabilities at the next position, and

    θ = softmax(ℓ[label ids]),   valid_mass = Σ_labels exp(ℓ[label]),   ℓ the server's log-softmax over the vocabulary,

the formulas of `paths.AnswerDist.from_logits`. ℓ of exactly the K option tokens is read from the response: vLLM's
`logprob_token_ids` (the listed ids' log-probabilities) where the server honours it, else its top log-probabilities,
asked for in growing numbers until every option is among them (each response is checked; a missing option is an
error naming the setting to raise, never a zero). Answers and seeds are drawn here, with the engine's generators, so a
served run is stored, resumed and reproduced like a local one.

The prompt is sent as our token ids where the server accepts token-id prompts (vLLM, llama.cpp's llama-server);
otherwise as text, and then the server's tokenization of every prompt (with a list of every answer after it) must
equal our ids (its tokenize endpoint), and every response's prompt-token count the count of ids we meant.
With `api=chat` the context is sent as the conversation it renders (the user's turn, then the assistant's turn so far,
continued by the server with its chat template), and the same checks hold the server's rendering to our ids.

Chain-of-thought rollouts (`ServedRollouts`) draw every token here too: the top log-probabilities, as many as it takes,
are turned into logits on which `cot.generation.nucleus_sampler` keeps the tokens, with the weights, it keeps on the
model's full logits (`nucleus_logits`). A server gives no hidden states.

Requests of a step go out together (asyncio + httpx on one background event loop, at most `concurrency` in flight);
429, 5xx, timeouts and dropped connections are retried with exponential back-off, after which the server's model is
checked again. Every other failure is a `ServedError` (a `UserError`: one line, exit status 2) raised before
anything of the step is stored.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from transformers import AutoTokenizer, GenerationConfig, PreTrainedTokenizerBase

from beliefdrift.backend.answer_tokens import AnswerTokens
from beliefdrift.backend.loading import LanguageModel, gguf_cache_path, locate_registry_gguf
from beliefdrift.backend.paths import AnswerDist
from beliefdrift.config.options import parse_model_args
from beliefdrift.errors import UserError, first_line
from beliefdrift.prompts.render import chat_context
from beliefdrift.registry import REGISTRY

if TYPE_CHECKING:
    import httpx

#: `--model openai:BASE_URL` selects a served model (the prefix style of `hf:` datasets).
SERVED_PREFIX = "openai:"
#: Server facts kept in the run identity: fields of the served model's /v1/models entry, /version, llama.cpp's /props.
MODEL_FACTS = ("id", "root", "parent", "owned_by", "max_model_len")
PROPS_FACTS = ("model_path", "build_info")
TOKEN_ID_KEY = "token_id:"
#: `--model-args api=…`: the endpoint below the API root that answers each step's one-token request.
APIS = {"completions": "/completions", "chat": "/chat/completions"}
#: Settings of a local model that a served run's identity leaves out (`runs.identity`): they change no number there.
SERVED_SETTINGS = ("dtype", "device", "attn_implementation", "model_args")
T = TypeVar("T")


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


@dataclass(frozen=True)
class ServerOptions:
    """`--model-args` of a served model (lm-eval's `local-completions` names where they fit: `tokenizer`,
    `timeout`). Only `served_model`, `tokenizer` and `api` change a number; the rest is how requests are made."""

    served_model: str | None = None  # the name the server serves it under (unset: the one /v1/models lists)
    api: str = "completions"  # or "chat": /v1/chat/completions, the server applying the model's chat template
    tokenizer: str | None = None  # registry name, hub id, directory or .gguf (unset: the served model's name)
    api_key_env: str | None = None  # the environment variable holding the API key (never stored)
    concurrency: int = 8  # requests in flight at once
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
            kind = known[key].type.split(" | ")[0]
            if key == "api" and value not in APIS:
                raise UserError(f"--model-args api={value}: expected one of {', '.join(APIS)}")
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

    def headers(self) -> dict[str, str]:
        """The Authorization header from the variable `api_key_env` names (none without it)."""
        if not self.api_key_env:
            return {}
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ServedError(f"--model-args api_key_env={self.api_key_env}: that environment variable is not set")
        return {"Authorization": f"Bearer {key}"}


class _Loop:
    """One event loop on a daemon thread: the engine is synchronous (and may itself run inside a notebook's loop), so
    every batch of requests is submitted here and waited for."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="beliefdrift-served", daemon=True).start()

    def run(self, coroutine: Awaitable[T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


def _message(response: httpx.Response) -> str:
    """The server's error message in `response` (OpenAI's {"error": {"message"}}, FastAPI's {"detail"}, or text)."""
    try:
        body = response.json()
    except ValueError:
        return " ".join(response.text.split())[:300]
    if isinstance(body, dict):
        error = body.get("error", body.get("detail", body))
        if isinstance(error, dict) and "message" in error:
            error = error["message"]
        return " ".join(str(error).split())[:300]
    return str(body)[:300]


def _httpx() -> Any:
    """The httpx module (the `serve` extra)."""
    try:
        import httpx
    except ImportError:
        raise UserError("a served model needs httpx: pip install 'beliefdrift[serve]'") from None
    return httpx


class Server:
    """HTTP to one server: JSON requests with retries and back-off, `concurrency` at a time."""

    def __init__(self, url: str, options: ServerOptions):
        _httpx()
        self.url = url
        self.options = options
        self.headers = options.headers()
        self.retried = False  # a request needed a retry since the flag was last cleared
        self._loop = _Loop()
        self._client: httpx.AsyncClient | None = None
        self._slots: asyncio.Semaphore | None = None

    def run(self, coroutine: Awaitable[T]) -> T:
        return self._loop.run(coroutine)

    def close(self) -> None:
        """Close the connections and stop the event loop's thread."""
        if self._client is not None:
            self.run(self._client.aclose())
        self._loop.close()

    async def request(self, method: str, path: str, body: Any = None, retry: bool = True) -> httpx.Response:
        """The response to one request: 429 and 5xx are retried like timeouts and dropped connections,
        `options.retries` times with back-off (not at all without `retry`, which returns them), and a ServedError once
        the retries are spent."""
        httpx = _httpx()
        if self._client is None:
            self._client = httpx.AsyncClient(base_url=self.url, headers=self.headers,
                                             timeout=httpx.Timeout(self.options.timeout),
                                             limits=httpx.Limits(max_connections=self.options.concurrency))
            self._slots = asyncio.Semaphore(self.options.concurrency)
        assert self._slots is not None
        attempts = self.options.retries + 1 if retry else 1
        for attempt in range(attempts):
            wait = self.options.backoff * 2**attempt
            try:
                async with self._slots:
                    response = await self._client.request(method, path, json=body)
            except httpx.TimeoutException:
                failure = f"no answer within {self.options.timeout:g} s (--model-args timeout=…)"
            except httpx.TransportError as err:
                failure = f"{type(err).__name__}: {first_line(err)}"
            else:
                if (response.status_code != 429 and response.status_code < 500) or not retry:
                    return response
                failure = f"HTTP {response.status_code}: {_message(response)}"
                after = response.headers.get("retry-after", "")
                wait = float(after) if after.replace(".", "", 1).isdigit() else wait
            if attempt + 1 < attempts:
                self.retried = True
                await asyncio.sleep(min(wait, 30.0))
        tries = f" (after {attempts} attempts; --model-args retries=…)" if attempts > 1 else ""
        raise ServedError(f"{self.where(path)}: {failure}{tries}")

    def where(self, path: str) -> str:
        """The URL of `path` (below the API root, or absolute)."""
        return path if path.startswith(("http://", "https://")) else self.url + path

    def raise_for(self, response: httpx.Response, path: str) -> None:
        """A ServedError for an error status, with the server's message (401 and 403 name the API key setting)."""
        status = f"HTTP {response.status_code}: {_message(response)}"
        if response.status_code in (401, 403):
            raise ServedError(f"{self.where(path)}: the server refused the request ({status}); give its API key in an "
                              "environment variable named by --model-args api_key_env=VAR")
        raise ServedError(f"{self.where(path)}: {status}")

    async def json(self, method: str, path: str, body: Any = None) -> Any:
        """The JSON body of a successful request; an error status is a ServedError (`raise_for`), a body that is
        not JSON one saying the response was cut short."""
        response = await self.request(method, path, body)
        if response.status_code >= 400:
            self.raise_for(response, path)
        try:
            return response.json()
        except ValueError:
            raise ServedError(f"{self.where(path)}: the response is not complete JSON (cut short?): "
                              f"{response.text[-80:]!r}") from None

    async def optional(self, path: str) -> Any:
        """GET `path`'s JSON (a path below the API root, or an absolute URL), or None where the server has no such
        endpoint (or any error)."""
        try:
            response = await self.request("GET", path, retry=False)
            return response.json() if response.status_code == 200 else None
        except (ServedError, ValueError):
            return None

    @property
    def root(self) -> str:
        """The server's root (the API root without /v1), where vLLM's /version and llama.cpp's /props live."""
        return self.url.removesuffix("/v1")


async def _facts(server: Server, wanted: str | None) -> tuple[str, dict[str, Any]]:
    """(the served model's name, what the server reports about itself): its /v1/models entry (the fields in
    `MODEL_FACTS`), /version and llama.cpp's /props where they exist. No secrets, nothing that changes per request."""
    listing = await server.json("GET", "/models")
    entries = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "id" in e for e in entries):
        raise ServedError(f"{server.url}/models: not an OpenAI model list ({str(listing)[:120]}); is {server.url} "
                          "the server's OpenAI API root (…/v1)?")
    names = [str(e["id"]) for e in entries]
    if wanted is None:
        if len(names) != 1:
            raise ServedError(f"{server.url} serves {len(names)} models ({', '.join(names) or 'none'}); choose one "
                              "with --model-args served_model=NAME")
        wanted = names[0]
    elif wanted not in names:
        raise ServedError(f"--model-args served_model={wanted}: {server.url} serves {', '.join(names) or 'no model'}")
    entry = entries[names.index(wanted)]
    facts: dict[str, Any] = {key: entry[key] for key in MODEL_FACTS if entry.get(key) is not None}
    version = await server.optional(server.root + "/version")
    if isinstance(version, dict) and "version" in version:
        facts["version"] = version["version"]
    props = await server.optional(server.root + "/props")
    if isinstance(props, dict):
        facts |= {key: props[key] for key in PROPS_FACTS if props.get(key) is not None}
    return wanted, facts


def _gguf(source: str) -> Path | None:
    """The GGUF file `source` names (a registry name or a .gguf path), else None."""
    path = locate_registry_gguf(source) if source in REGISTRY else Path(source).expanduser()
    return path if path.suffix == ".gguf" else None


def _load_tokenizer(source: str, revision: str | None, trust_remote_code: bool) -> PreTrainedTokenizerBase:
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


def _generation_config(source: str) -> Any:
    """The generation config beside the tokenizer (its end-of-sequence ids), or an empty one (a GGUF file's
    end-of-sequence token is its tokenizer's)."""
    try:
        if _gguf(source) is None:
            return GenerationConfig.from_pretrained(source)
    except (OSError, ValueError):
        pass
    return SimpleNamespace(eos_token_id=None)


class Endpoint:
    """A served model as the engine sees it (`LanguageModel.model`): `prefill` gives the answer paths of a prompt
    (`ServedBatch`, the `PathBatch` interface), `config.max_position_embeddings` the server's context where it says
    (else None: the server refuses a prompt that is too long itself), `generation_config` the end-of-sequence ids."""

    def __init__(self, spec: str, options: ServerOptions, revision: str | None = None,
                 trust_remote_code: bool = False):
        self.spec = spec
        self.options = options
        self.server = Server(base_url(spec), options)
        self.name, self.facts = self.server.run(_facts(self.server, options.served_model))
        source = options.tokenizer or self.name
        self.tokenizer = _load_tokenizer(source, revision, trust_remote_code)
        self.generation_config = _generation_config(source)
        self.config = SimpleNamespace(max_position_embeddings=self.facts.get("max_model_len"))
        self.max_logprobs = min(options.max_logprobs or len(self.tokenizer), len(self.tokenizer))
        self.logprobs = min(options.logprobs, self.max_logprobs)  # raised for good once a response left out an option
        self.generation_logprobs = self.logprobs  # raised for good once a response left a draw undetermined
        self._cache: dict[tuple[int, ...], torch.Tensor] = {}  # the options' ℓ after a context (bounded)
        self._checked: set[tuple[int, ...]] = set()  # prompts whose tokenization the server confirmed (text prompts)
        self._keys: dict[int, str] = {}  # how text-keyed responses name each option token
        self.path = APIS[options.api]
        self.turns = chat_turns(self.tokenizer) if options.api == "chat" else None
        self.ids, self.extensions, self.tokenize_path, self.id_keys = self.server.run(self._probe())

    # ------------------------------------------------------------------ what the server accepts, asked once

    async def _probe(self) -> tuple[bool, bool, str | None, bool]:
        """(token-id prompts accepted, vLLM's exact-id fields accepted, the tokenize endpoint where prompts go as
        text, responses keyed by token id): one-token completions of a short prompt, in the most exact form the
        server accepts (a refusal of a form, even as a 5xx, moves on to the next; the last is retried). A server that
        takes neither token ids nor has a tokenize endpoint, or answers without log-probabilities, is a ServedError.
        Chat requests carry text; their tokenization is checked where /tokenize takes messages (vLLM)."""
        ids = self.tokenizer(self._probe_text(), add_special_tokens=False)["input_ids"]
        refusal = ""
        tokenize_path = None
        forms = ((False, True), (False, False)) if self.turns else ((True, True), (True, False), (False, True),
                                                                    (False, False))
        for as_ids, extensions in forms:
            if not as_ids and tokenize_path is None:
                tokenize_path = await self._tokenize_path()
                if tokenize_path is None and not self.turns:
                    raise ServedError(f"{self.server.url}: the server takes no token-id prompts ({refusal}) and has "
                                      "no tokenize endpoint, so nothing checks that it reads the prompts' tokens as we "
                                      "do; serve the model with vLLM, SGLang or llama.cpp's llama-server")
            last = not as_ids and not extensions
            body = self._body(ids if as_ids else self.tokenizer.decode(ids), 1, (), extensions)
            response = await self.server.request("POST", self.path, body, retry=last)
            if response.status_code != 200 and not last and response.status_code not in (401, 403, 404):
                refusal = f"HTTP {response.status_code}: {_message(response)[:100]}"
                continue
            top = self._top_logprobs(await self._checked_json(response), len(ids))
            return as_ids, extensions, tokenize_path, any(k.startswith(TOKEN_ID_KEY) for k in top)
        raise AssertionError("unreachable: the last form returns or raises")

    def _probe_text(self) -> str:
        """A short prompt: "Hello", in a chat conversation's assistant turn for chat requests."""
        return chat_context(self.tokenizer, "Hi", "Hello") if self.turns else "Hello"

    async def _tokenize_path(self) -> str | None:
        """The endpoint that tokenizes text as the server's completions do: llama-cpp-python's /extras/tokenize, or
        /tokenize (vLLM, llama.cpp, SGLang); for chat requests /tokenize taking messages (vLLM); None where there is
        none."""
        paths = ("/tokenize",) if self.turns else (self.server.root + "/extras/tokenize", "/tokenize")
        for path in paths:
            try:
                await self._tokenize(path, self._probe_text())
                return path
            except ServedError:
                continue
        return None

    async def _tokenize(self, path: str, text: str) -> list[int]:
        """The server's token ids of `text` (as its completions read a text prompt; for chat requests, as it renders
        the conversation `text` is)."""
        if self.turns:
            body = {"model": self.name, "messages": self._messages(text), "add_generation_prompt": False,
                    "continue_final_message": True, "add_special_tokens": False}
        elif path.endswith("/extras/tokenize"):
            body = {"input": text}
        else:
            body = {"model": self.name, "prompt": text, "content": text}
        tokens = (await self.server.json("POST", path, body)).get("tokens")
        if not isinstance(tokens, list):
            raise ServedError(f"{path}: no token list in its answer")
        return [int(t) for t in tokens]

    # ------------------------------------------------------------------ one completion: ℓ at the next position

    def _messages(self, text: str) -> list[dict[str, str]]:
        """The conversation whose chat rendering is `text`: its user turn, then the assistant's turn so far."""
        assert self.turns is not None
        before, between = self.turns
        user, found, assistant = text.removeprefix(before).partition(between)
        if not text.startswith(before) or not found:
            raise ServedError("--model-args api=chat: this prompt is not one user turn and the assistant's answer in "
                              "the model's chat template; use a chat --template, or the completions API")
        return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]

    def _body(self, prompt: list[int] | str, logprobs: int, label_ids: Sequence[int], extensions: bool) -> dict:
        if self.turns:
            assert isinstance(prompt, str)
            body: dict[str, Any] = {"model": self.name, "messages": self._messages(prompt), "max_tokens": 1,
                                    "temperature": 0.0, "logprobs": True, "top_logprobs": logprobs, "stream": False,
                                    "add_generation_prompt": False, "continue_final_message": True}
        else:
            body = {"model": self.name, "prompt": prompt, "max_tokens": 1, "temperature": 0.0, "logprobs": logprobs,
                    "echo": False, "stream": False}
        if extensions:
            body["return_tokens_as_token_ids"] = True
            if label_ids:
                body["logprob_token_ids"] = list(label_ids)
        return body

    async def _checked_json(self, response: httpx.Response) -> dict:
        """A completion response's JSON object; an error status or a body cut short is a ServedError."""
        if response.status_code >= 400:
            self.server.raise_for(response, self.path)
        try:
            data = response.json()
        except ValueError:
            raise ServedError(f"{self.server.url}{self.path}: the response is not complete JSON (cut short?): "
                              f"{response.text[-80:]!r}") from None
        if not isinstance(data, dict):
            raise ServedError(f"{self.server.url}{self.path}: expected a completion object, got {str(data)[:80]}")
        return data

    def _top_logprobs(self, data: dict, prompt_tokens: int) -> dict[str, float]:
        """The next position's top log-probabilities in a completion response, checked: the model answering is ours,
        the server counted the prompt tokens we sent, the log-probabilities are there."""
        where = f"{self.server.url}{self.path}"
        model = data.get("model")
        if model is not None and model != self.name:
            raise ServedError(f"{where} answered as model {model!r}, not {self.name!r}: the server's model changed "
                              "during the run; serve the run's model again and resume")
        counted = (data.get("usage") or {}).get("prompt_tokens")
        if counted is not None and counted != prompt_tokens:
            how = ("renders the conversation with another chat template than our tokenizer's" if self.turns else
                   "does not read the prompt as our tokenizer does")
            raise ServedError(f"{where} counted {counted} prompt tokens where we sent {prompt_tokens}: the server "
                              f"{how} (--model-args tokenizer=…)")
        try:
            choice = data["choices"][0]
        except (KeyError, IndexError, TypeError):
            raise ServedError(f"{where}: the response has no completion (cut short?): {str(data)[:120]}") from None
        top = _first_top_logprobs(choice)
        if not top:
            raise ServedError(f"{where} returned no log-probabilities; start the server with them on (llama-cpp-"
                              "python: --logits_all true; vLLM and llama-server return them when asked)")
        return top

    @cached_property
    def _shared_texts(self) -> dict[str, list[int]]:
        """Texts that several tokens of the vocabulary decode to (invalid UTF-8 dropped, as text-keyed responses
        write them): a response keyed by such a text cannot say which token it means."""
        texts: dict[str, list[int]] = {}
        for token, text in enumerate(self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])):
            texts.setdefault(text.replace("\ufffd", ""), []).append(token)
        return {text: tokens for text, tokens in texts.items() if len(tokens) > 1}

    async def _learn_keys(self, label_ids: Sequence[int]) -> None:
        """How a text-keyed response names each option: the server's own detokenization where it has one
        (llama-cpp-python's /extras/detokenize), else our tokenizer's; an option whose text another token shares
        is a ServedError."""
        for token in label_ids:
            if token in self._keys:
                continue
            ours = self.tokenizer.decode([token])
            shared = self._shared_texts.get(ours.replace("\ufffd", ""))
            if shared:
                raise ServedError(f"the option token {token} ({ours!r}) reads the same as the tokens {shared} in the "
                                  "server's log-probabilities, which name tokens by their text; use a server that "
                                  "names them by id (vLLM)")
            response = await self.server.request("POST", self.server.root + "/extras/detokenize", {"tokens": [token]},
                                                 retry=False)
            text = response.json().get("text") if response.status_code == 200 else None
            self._keys[token] = text if isinstance(text, str) else ours

    def _option_logprobs(self, top: Mapping[str, float], label_ids: Sequence[int]) -> list[float | None]:
        """ℓ of each option in a response's top log-probabilities (keys "token_id:N" or token text); None: absent."""
        if any(key.startswith(TOKEN_ID_KEY) for key in top):
            by_id = {int(key[len(TOKEN_ID_KEY):]): value for key, value in top.items()}
            found = [by_id.get(token) for token in label_ids]
        else:
            found = [top.get(self._keys[token]) for token in label_ids]
        return [None if v is None else float(v) for v in found]

    async def _top(self, ids: Sequence[int], count: int, label_ids: Sequence[int] = ()) -> dict[str, float]:
        """The top `count` log-probabilities (or, where the server honours `logprob_token_ids`, those of
        `label_ids`) at the position after the context `ids`, as the response keys them.

        A server that attaches log-probabilities to the generated token gives none when that token ends the
        sequence (llama-cpp-python); the request is then made again with the special tokens' sampling biased away
        (`logit_bias`, which there changes the draw of the one generated token, not the log-probabilities)."""
        prompt: list[int] | str = list(ids) if self.ids else self.tokenizer.decode(list(ids))
        body = self._body(prompt, count, label_ids, self.extensions)
        data = await self._checked_json(await self.server.request("POST", self.path, body))
        if _ended_at_once(data):
            body["logit_bias"] = {str(token): -100 for token in self.tokenizer.all_special_ids}
            data = await self._checked_json(await self.server.request("POST", self.path, body))
        return self._top_logprobs(data, len(ids))

    async def _theta(self, ids: tuple[int, ...], label_ids: Sequence[int]) -> torch.Tensor:
        """ℓ of the options [K] after the context `ids`: one request, more while an option is not among the top
        log-probabilities (up to `max_logprobs`, after which it is a ServedError naming the settings)."""
        while True:
            count = self.logprobs
            found = self._option_logprobs(await self._top(ids, count, label_ids), label_ids)
            if all(v is not None for v in found):
                return torch.tensor(found, dtype=torch.float32)
            if count >= self.max_logprobs:
                missing = [self.tokenizer.decode([t]) for t, v in zip(label_ids, found, strict=True) if v is None]
                raise ServedError(f"the server's top {count} log-probabilities leave out the option(s) {missing}; let "
                                  "it return more (vLLM: --max-logprobs, or a version with logprob_token_ids) and "
                                  "raise --model-args max_logprobs=…")
            self.logprobs = max(self.logprobs, min(count * 8, self.max_logprobs))

    async def _check_prompt(self, tokens: AnswerTokens) -> None:
        """Text prompts only: the server's tokenization of the prompt, followed by every answer (and the first again)
        where answers follow one another, must be our ids."""
        sequence = [*range(len(tokens.label_ids)), 0] if tokens.delimiter_ids else []
        await self._check_ids(list(tokens.prompt_ids) + [t for i in sequence for t in tokens.answer_ids(i)])

    async def _check_ids(self, ids: list[int]) -> None:
        """Text prompts only: the server's tokenization of the text of `ids` must be `ids`."""
        assert self.tokenize_path is not None
        theirs = await self._tokenize(self.tokenize_path, self.tokenizer.decode(ids))
        if theirs != ids:
            at = next((i for i, (a, b) in enumerate(zip(theirs, ids, strict=False)) if a != b),
                      min(len(ids), len(theirs)))
            raise ServedError(f"the server tokenizes the prompt differently from our tokenizer (first difference at "
                              f"token {at}: {theirs[at:at + 3]} vs {ids[at:at + 3]}); name the model's own tokenizer "
                              "with --model-args tokenizer=…" + (", whose chat template the server must use" if
                                                                 self.turns else ", or serve it where token-id "
                                                                 "prompts are accepted"))

    async def _gather(self, prompts: Sequence[AnswerTokens], contexts: Sequence[tuple[int, ...]],
                      label_ids: Sequence[int]) -> list[torch.Tensor]:
        if not self.id_keys:
            await self._learn_keys(label_ids)
        checks = {} if self.ids or not self.tokenize_path else {t.prompt_ids: t for t in prompts
                                                                 if t.prompt_ids not in self._checked}
        await asyncio.gather(*(self._check_prompt(t) for t in checks.values()))
        self._checked.update(checks)
        return await asyncio.gather(*(self._theta(ids, label_ids) for ids in contexts))

    def label_logprobs(self, prompts: Sequence[AnswerTokens], contexts: Sequence[tuple[int, ...]],
                       label_ids: Sequence[int]) -> torch.Tensor:
        """ℓ of the options [B, K] after each context (the prompt `prompts[b]`, then its answers): every context not
        seen before requested at once, each distinct one once. After a request needed a retry, the server's model is
        checked again before any θ is returned."""
        todo = {c: t for t, c in zip(prompts, contexts, strict=True) if c not in self._cache}
        if todo:
            self.server.retried = False
            values = self.server.run(self._gather(list(todo.values()), list(todo), label_ids))
            if self.server.retried:
                self.check_model()
            if len(self._cache) + len(todo) > 1 << 16:
                self._cache.clear()
            self._cache.update(zip(todo, values, strict=True))
        return torch.stack([self._cache[c] for c in contexts]) if contexts else torch.empty(0, len(label_ids))

    def check_model(self) -> None:
        """The server still serves the model we connected to, as it described itself then (a restarted server may
        serve another)."""
        try:
            _, facts = self.server.run(_facts(self.server, self.name))
        except ServedError as err:
            raise ServedError(f"the served model changed during the run ({err}); serve the run's model again and "
                              "resume") from None
        if facts != self.facts:
            raise ServedError(f"{self.server.url} now reports {facts}, not {self.facts}: the served model changed "
                              "during the run; serve the run's model again and resume")

    # ------------------------------------------------------------------ generation (cot): next-token logits

    @cached_property
    def _token_of_text(self) -> dict[str, int]:
        """The token each text names in text-keyed responses, for the texts exactly one token decodes to."""
        owners: dict[str, list[int]] = {}
        for token, text in enumerate(self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])):
            owners.setdefault(text.replace("\ufffd", ""), []).append(token)
        return {text: tokens[0] for text, tokens in owners.items() if len(tokens) == 1}

    def _top_ids(self, top: Mapping[str, float]) -> tuple[list[int], list[float]]:
        """A response's top log-probabilities as (token ids, values); a text several tokens share is a ServedError."""
        if any(key.startswith(TOKEN_ID_KEY) for key in top):
            return [int(k[len(TOKEN_ID_KEY):]) for k in top], [float(v) for v in top.values()]
        unknown = [key for key in top if key not in self._token_of_text]
        if unknown:
            raise ServedError(f"the server names tokens by text and {unknown[0]!r} is the text of several tokens, so "
                              "the sampled token would be a guess; use a server that names tokens by id (vLLM)")
        return [self._token_of_text[k] for k in top], [float(v) for v in top.values()]

    async def _next_logits(self, ids: Sequence[int], nucleus: tuple[float, float, Sequence[int]]) -> torch.Tensor:
        """`nucleus_logits` after the context `ids`, asking for more top log-probabilities until they determine the
        draw (up to `max_logprobs`, after which it is a ServedError naming the settings)."""
        while True:
            count = self.generation_logprobs
            tokens, values = self._top_ids(await self._top(ids, count))
            logits = nucleus_logits(tokens, values, len(self.tokenizer), *nucleus)
            if logits is not None:
                return logits
            if count >= self.max_logprobs:
                raise ServedError(f"the server's top {count} log-probabilities do not determine the nucleus of "
                                  f"--temperature {nucleus[0]:g} --top-p {nucleus[1]:g}; let it return more (vLLM: "
                                  "--max-logprobs) and raise --model-args max_logprobs=…, or lower --top-p")
            self.generation_logprobs = max(self.generation_logprobs, min(count * 8, self.max_logprobs))

    def next_logits(self, contexts: Sequence[Sequence[int]], nucleus: tuple[float, float, Sequence[int]]
                    ) -> torch.Tensor:
        """`nucleus_logits` [B, vocab] after every context, all requested at once (the generated tokens' text is held
        to our ids by every response's prompt-token count)."""
        async def every() -> list[torch.Tensor]:
            return await asyncio.gather(*(self._next_logits(c, nucleus) for c in contexts))

        rows = self.server.run(every())
        return torch.stack(rows) if rows else torch.empty(0, len(self.tokenizer))

    def rollouts(self, prompt_ids: Sequence[int]) -> ServedRollouts:
        """One rollout holding the prompt (`cot.generation.PromptCache`); a text prompt is checked against the
        server's tokenization once."""
        if not self.ids and self.tokenize_path and tuple(prompt_ids) not in self._checked:
            self.server.run(self._check_ids(list(prompt_ids)))
            self._checked.add(tuple(prompt_ids))
        return ServedRollouts(self, [tuple(prompt_ids)])

    # ------------------------------------------------------------------ the PathBatch interface

    def prefill(self, tokens: AnswerTokens) -> ServedBatch:
        """One path holding the prompt (θ fetched when first read)."""
        return ServedBatch(self, tokens, [tokens], [tokens.prompt_ids])


def _first_top_logprobs(choice: Any) -> dict[str, float] | None:
    """The first generated position's top log-probabilities in a choice, keyed by token: a completion's
    `logprobs.top_logprobs[0]` ({token: ℓ}) or a chat completion's `logprobs.content[0].top_logprobs`
    ([{token, logprob}]); None where the choice has none."""
    logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
    if not isinstance(logprobs, dict):
        return None
    top = logprobs.get("top_logprobs")
    if top is not None:
        return top[0] if isinstance(top, list) and top and isinstance(top[0], dict) and top[0] else None
    content = logprobs.get("content")
    try:
        return {str(entry["token"]): float(entry["logprob"]) for entry in content[0]["top_logprobs"]} or None
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def _ended_at_once(data: dict) -> bool:
    """Whether a completion response generated nothing: its one token ended the sequence."""
    try:
        choice = data["choices"][0]
        text = choice["message"].get("content") if "message" in choice else choice.get("text")
        return not text and choice.get("finish_reason") == "stop" and not _first_top_logprobs(choice)
    except (KeyError, IndexError, TypeError, AttributeError):
        return False


def chat_turns(tokenizer: PreTrainedTokenizerBase) -> tuple[str, str]:
    """(what the model's chat template writes before a user turn's text, what it writes between that text and the
    assistant's): the frame `_messages` reads a rendered context by. A tokenizer without a chat template is a
    ServedError."""
    marker = "\x00user\x00"
    rendered = chat_context(tokenizer, marker)
    if not getattr(tokenizer, "chat_template", None) or rendered.count(marker) != 1:
        raise ServedError("--model-args api=chat: the tokenizer has no chat template to read the prompts by; use the "
                          "completions API")
    before, _, between = rendered.partition(marker)
    return before, between


def dist_from_logprobs(logprobs: torch.Tensor) -> AnswerDist:
    """θ = softmax(ℓ[labels]) and valid_mass = Σ exp(ℓ[labels]) from the options' log-probabilities [..., K]."""
    return AnswerDist(torch.softmax(logprobs, dim=-1), logprobs.exp().sum(-1))


class ServedBatch:
    """B answer paths on a server, as `PathBatch` has them: each path's context (its prompt's ids, then the ids of its
    answers) and θ, fetched for every path at once when first read (`dist`) and after every `advance`."""

    def __init__(self, endpoint: Endpoint, tokens: AnswerTokens, prompts: list[AnswerTokens],
                 contexts: list[tuple[int, ...]], dist: AnswerDist | None = None):
        self.endpoint = endpoint
        self.tokens = tokens
        self.prompts = prompts
        self.contexts = contexts
        self._dist = dist

    @property
    def size(self) -> int:
        return len(self.contexts)

    @property
    def dist(self) -> AnswerDist:
        if self._dist is None:
            label_ids = self.tokens.label_ids
            self._dist = dist_from_logprobs(self.endpoint.label_logprobs(self.prompts, self.contexts, label_ids))
        return self._dist

    def select(self, index: torch.Tensor | list[int]) -> ServedBatch:
        index = torch.as_tensor(index, dtype=torch.long).tolist()
        dist = None if self._dist is None else AnswerDist(self._dist.probs[index], self._dist.valid_mass[index])
        return ServedBatch(self.endpoint, self.tokens, [self.prompts[i] for i in index],
                           [self.contexts[i] for i in index], dist)

    @staticmethod
    def concat(batches: Sequence[ServedBatch]) -> ServedBatch:
        first = batches[0]
        if any(b.tokens.label_ids != first.tokens.label_ids or b.tokens.delimiter_ids != first.tokens.delimiter_ids
               for b in batches):
            raise ValueError("only paths with the same answer tokens can share a batch")
        dist = None
        if all(b._dist is not None for b in batches):
            dist = AnswerDist(torch.cat([b.dist.probs for b in batches]),
                              torch.cat([b.dist.valid_mass for b in batches]))
        return ServedBatch(first.endpoint, first.tokens, [p for b in batches for p in b.prompts],
                           [c for b in batches for c in b.contexts], dist)

    def fork(self, copies: int) -> ServedBatch:
        return self.select(torch.arange(self.size).repeat_interleave(copies))

    def reserve(self, answers: int) -> None:
        """Nothing: the server keeps its own cache."""

    def advance(self, answers: torch.Tensor) -> AnswerDist:
        """Append answers [B, m] (label indices) to every path; the new θ of every path (one request per distinct
        context, all in flight together)."""
        rows = answers.reshape(self.size, -1).tolist()
        self.contexts = [c + tuple(t for a in row for t in self.tokens.answer_ids(a))
                         for c, row in zip(self.contexts, rows, strict=True)]
        self._dist = None
        return self.dist


class ServedRollouts:
    """Rollouts on a server as `cot.generation` decodes them (the `PathCache` interface there): each rollout's context
    ids; `extend` appends tokens and returns every rollout's next-token `nucleus_logits`."""

    def __init__(self, endpoint: Endpoint, contexts: list[tuple[int, ...]]):
        self.endpoint = endpoint
        self.contexts = contexts
        self.size = len(contexts)

    def select(self, index: torch.Tensor) -> ServedRollouts:
        return ServedRollouts(self.endpoint, [self.contexts[i] for i in torch.as_tensor(index).tolist()])

    def reserve(self, tokens: int) -> None:
        """Nothing: the server keeps its own cache."""

    def extend(self, input_ids: torch.Tensor, padding: torch.Tensor | None, nucleus: tuple[float, float, Sequence[int]],
               active: Sequence[int] | None = None) -> torch.Tensor:
        """Append input_ids [B, T] (the first `padding[b]` of row b are padding, left out) to every rollout; the
        next-token logits [B, vocab] of the rollouts in `active` (all by default), from one request each, for the
        sampler of `nucleus` (temperature, top_p, banned ids; see `nucleus_logits`). The other rows are zeros."""
        skip = [0] * self.size if padding is None else padding.tolist()
        self.contexts = [c + tuple(row[s:]) for c, row, s in zip(self.contexts, input_ids.tolist(), skip, strict=True)]
        rows = list(range(self.size)) if active is None else list(active)
        logits = torch.zeros(self.size, len(self.endpoint.tokenizer))
        if rows:
            logits[rows] = self.endpoint.next_logits([self.contexts[r] for r in rows], nucleus)
        return logits


def nucleus_logits(tokens: Sequence[int], logprobs: Sequence[float], vocab: int, temperature: float, top_p: float,
                   banned: Sequence[int] = ()) -> torch.Tensor | None:
    """Next-token logits [vocab] on which `cot.generation.nucleus_sampler(temperature, top_p)` (with the `banned` ids
    set to −∞) keeps the same tokens, with the same weights, as on the model's full logits, made from the top
    log-probabilities alone (`tokens`, `logprobs`: the log-softmax at T = 1); None when they do not determine that.

    The kept set is the shortest run of most likely tokens whose tempered mass p_i^{1/T} / Z reaches top_p. Of Z only
    the top tokens' part S is known; the rest U, over tokens each at most p_min (the smallest top probability) and
    together holding the remaining mass r (less any banned ones), lies in [0, r·p_min^{1/T−1}] for T ≤ 1 and in
    [r·p_min^{1/T−1}, n·(r/n)^{1/T}] for T > 1 (n tokens outside the top). The draw is determined when the kept set is
    the same for every Z in that range and lies inside the top; the tokens outside get U spread evenly. T = 0: the
    most likely allowed token."""
    banned_set = set(banned)
    top = torch.tensor(logprobs, dtype=torch.float64)
    ids = torch.tensor(list(tokens), dtype=torch.long)
    allowed = torch.tensor([t not in banned_set for t in tokens], dtype=torch.bool)
    logits = torch.full((vocab,), float("-inf"))
    if not bool(allowed.any()):
        return None
    logits[ids[allowed]] = top[allowed].float()
    if temperature == 0:
        return logits
    p_min = float(top.exp().min())
    hidden_banned = len(banned_set - set(tokens))
    outside = vocab - len(tokens) - hidden_banned
    rest_hi = max(0.0, 1.0 - float(top.exp().sum())) if outside > 0 else 0.0
    rest_lo = max(0.0, rest_hi - hidden_banned * p_min)
    power = 1.0 / temperature
    tempered = (top[allowed] * power).exp().sort(descending=True).values
    known = float(tempered.sum())
    if power >= 1:
        low, high = 0.0, rest_hi * p_min ** (power - 1)
    else:
        low, high = rest_lo * p_min ** (power - 1), outside * (rest_hi / outside) ** power if outside else 0.0
    before = torch.cat([tempered.cumsum(0) - tempered, tempered.new_tensor([known])])  # mass ahead of each token

    def kept(total: float) -> int:
        return int((before < top_p * total).sum())

    if kept(known + low) != kept(known + high) or kept(known + high) > len(tempered):
        return None
    spread = (low + high) / 2
    if spread > 0:
        mask = torch.ones(vocab, dtype=torch.bool)
        mask[ids] = False
        mask[list(banned_set)] = False
        logits[mask] = temperature * torch.log(torch.tensor(spread / outside)).float()
    return logits


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
    log-probabilities, reading our tokens (see the module's docstring)."""
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
    return connect(options.model, parse_model_args(options.model_args), options.revision, options.trust_remote_code)


def served_identity(spec: str, model_args: Mapping[str, Any]) -> dict[str, Any]:
    """What a served run's identity records instead of dtype, device and from_pretrained keywords: the endpoint, the
    served model's name, the tokenizer's source and the server's facts (`_facts`; never the API key)."""
    options = ServerOptions.from_args(model_args)
    server = Server(base_url(spec), options)
    try:
        name, facts = server.run(_facts(server, options.served_model))
    finally:
        server.close()
    api = {"api": options.api} if options.api != "completions" else {}
    return {"model": spec, "served_model": name, "tokenizer": options.tokenizer or name, **api, "server": facts}
