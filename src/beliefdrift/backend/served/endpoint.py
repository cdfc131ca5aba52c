"""One served model as the engine reaches it (`Endpoint`): what the server accepts, asked once; the options'
log-probabilities after each answer path's context; the top log-probabilities after each rollout's context.

ℓ of exactly the K option tokens is read from the response: vLLM's `logprob_token_ids` (the listed ids'
log-probabilities) where the server honours it, else its top log-probabilities, asked for in growing numbers until
every option is among them (each response is checked; a missing option is an error naming the setting to raise, never
a zero). The prompt is sent as our token ids where the server accepts token-id prompts (vLLM, llama.cpp's
llama-server); otherwise as text, and then the server's tokenization of every prompt (with a list of every answer
after it) must equal our ids (its tokenize endpoint), and every response's prompt-token count the count of ids we
meant. After a request needed a retry, the server's model is checked again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, TypeVar

import torch

from beliefdrift.backend.answer_tokens import AnswerTokens
from beliefdrift.backend.sampling import nucleus_logits
from beliefdrift.backend.served.completions import Reply
from beliefdrift.backend.served.options import ServerOptions
from beliefdrift.backend.served.spec import ServedError, base_url
from beliefdrift.backend.served.tokens import TokenMap, generation_config, keyed_by_id, load_tokenizer
from beliefdrift.backend.served.transport import Response, Transport, refusal

#: Server facts kept in the run identity: fields of the served model's /v1/models entry, /version, llama.cpp's /props.
MODEL_FACTS = ("id", "root", "parent", "owned_by", "max_model_len")
PROPS_FACTS = ("model_path", "build_info")
#: The most contexts whose options' ℓ an endpoint keeps (then it starts afresh).
CACHED_CONTEXTS = 1 << 16
#: The top log-probabilities the probe asks for (as many as every server gives).
PROBE_LOGPROBS = 5
#: How far a log-probability of the probe, asked again after a reconnect, may move with the model unchanged: the
#: server's own rounding of one prompt between calls. The probe is one token, evaluated alone whatever the server's
#: cache holds (|Δℓ| = 0 measured on llama-server and llama-cpp-python after other prompts); a GPU server's kernels
#: may round otherwise in another batch. Another model under the same name moves them further.
PROBE_TOLERANCE = 0.02
T = TypeVar("T")
#: (temperature, top_p, banned token ids): the sampler a rollout's next token is drawn with (`nucleus_logits`).
Nucleus = tuple[float, float, Sequence[int]]


@dataclass
class TopCount:
    """How many top log-probabilities a request asks for: `count`, raised for good (×8, up to `most`) once a response
    fell short, so that later requests ask for enough at once."""

    count: int
    most: int

    def raise_from(self, asked: int) -> None:
        self.count = max(self.count, min(asked * 8, self.most))


async def server_facts(transport: Transport, wanted: str | None) -> tuple[str, dict[str, Any]]:
    """(the served model's name, what the server reports about itself): its /v1/models entry (the fields in
    `MODEL_FACTS`), /version and llama.cpp's /props where they exist. No secrets, nothing that changes per request."""
    listing = await transport.json("GET", "/models")
    entries = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "id" in e for e in entries):
        raise ServedError(f"{transport.url}/models: not an OpenAI model list ({str(listing)[:120]}); is "
                          f"{transport.url} the server's OpenAI API root (…/v1)?")
    names = [str(e["id"]) for e in entries]
    if wanted is None:
        if len(names) != 1:
            raise ServedError(f"{transport.url} serves {len(names)} models ({', '.join(names) or 'none'}); choose one "
                              "with --model-args served_model=NAME")
        wanted = names[0]
    elif wanted not in names:
        raise ServedError(f"--model-args served_model={wanted}: {transport.url} serves "
                          f"{', '.join(names) or 'no model'}")
    entry = entries[names.index(wanted)]
    facts: dict[str, Any] = {key: entry[key] for key in MODEL_FACTS if entry.get(key) is not None}
    version = await transport.optional(transport.root + "/version")
    if isinstance(version, dict) and "version" in version:
        facts["version"] = version["version"]
    props = await transport.optional(transport.root + "/props")
    if isinstance(props, dict):
        facts |= {key: props[key] for key in PROPS_FACTS if props.get(key) is not None}
    return wanted, facts


class Endpoint:
    """A served model as the engine reaches it (`ServedModel.model`): `label_logprobs` for answer paths,
    `next_logits` for rollouts, `config.max_position_embeddings` the server's context where it says (else None: the
    server refuses a prompt that is too long itself), `generation_config` the end-of-sequence ids."""

    def __init__(self, spec: str, options: ServerOptions, revision: str | None = None,
                 trust_remote_code: bool = False):
        self.spec = spec
        self.options = options
        self.transport = Transport(base_url(spec), options)
        self.name, self.facts = self.transport.run(server_facts(self.transport, options.served_model))
        source = options.tokenizer or self.name
        self.tokenizer = load_tokenizer(source, revision, trust_remote_code)
        self.tokens = TokenMap(self.tokenizer)
        self.generation_config = generation_config(source)
        self.config = SimpleNamespace(max_position_embeddings=self.facts.get("max_model_len"))
        self.max_logprobs = min(options.max_logprobs or len(self.tokenizer), len(self.tokenizer))
        first = min(options.logprobs, self.max_logprobs)
        self.option_top = TopCount(first, self.max_logprobs)  # for answer paths: every option among them
        self.draw_top = TopCount(first, self.max_logprobs)  # for rollouts: the nucleus sampler's draw determined
        self._cache: dict[tuple[int, ...], torch.Tensor] = {}  # the options' ℓ after a context (bounded)
        self._checked: set[tuple[int, ...]] = set()  # prompts whose tokenization the server confirmed (text prompts)
        self.dialect = options.dialect(self.name, self.tokenizer)
        self.ids, self.extensions, self.tokenize_path, self.id_keys = self.transport.run(self._probe())

    # ------------------------------------------------------------------ what the server accepts, asked once

    async def _probe(self) -> tuple[bool, bool, str | None, bool]:
        """(token-id prompts accepted, vLLM's exact-id fields accepted, the tokenize endpoint where prompts go as
        text, responses keyed by token id): one-token completions of a short prompt, in the most exact form the
        server accepts (a refusal of a form, even as a 5xx, moves on to the next; the last is retried). A server that
        takes neither token ids nor has a tokenize endpoint (where the dialect needs one), or answers without
        log-probabilities, is a ServedError."""
        ids = self.tokenizer(self.dialect.probe_text(), add_special_tokens=False)["input_ids"]
        refused = ""
        tokenize_path = None
        forms = (((True, True), (True, False)) if self.dialect.token_ids else ()) + ((False, True), (False, False))
        for as_ids, extensions in forms:
            if not as_ids and tokenize_path is None:
                tokenize_path = await self._tokenize_path()
                if tokenize_path is None and self.dialect.tokenize_required:
                    raise ServedError(f"{self.transport.url}: the server takes no token-id prompts ({refused}) and has "
                                      "no tokenize endpoint, so nothing checks that it reads the prompts' tokens as we "
                                      "do; serve the model with vLLM, SGLang or llama.cpp's llama-server")
            last = not as_ids and not extensions
            body = self.dialect.body(ids if as_ids else self.tokenizer.decode(ids), PROBE_LOGPROBS, (), extensions)
            response = await self.transport.request("POST", self.dialect.path, body, retry=last)
            if response.status_code != 200 and not last and response.status_code not in (401, 403, 404):
                refused = refusal(response)
                continue
            top = self._top_logprobs(self._reply(response), len(ids))
            self._probe_answer = (body, len(ids), top)  # asked again after a reconnect (`check_model`)
            return as_ids, extensions, tokenize_path, keyed_by_id(top)
        raise AssertionError("unreachable: the last form returns or raises")

    async def _tokenize_path(self) -> str | None:
        """The first of the dialect's tokenize endpoints the server answers; None where there is none."""
        for path in self.dialect.tokenize_paths(self.transport.root):
            try:
                await self._tokenize(path, self.dialect.probe_text())
                return path
            except ServedError:
                continue
        return None

    async def _tokenize(self, path: str, text: str) -> list[int]:
        """The server's token ids of `text` (as its completions read a text prompt; for chat requests, as it renders
        the conversation `text` is)."""
        tokens = (await self.transport.json("POST", path, self.dialect.tokenize_body(path, text))).get("tokens")
        if not isinstance(tokens, list):
            raise ServedError(f"{path}: no token list in its answer")
        return [int(t) for t in tokens]

    # ------------------------------------------------------------------ one completion: ℓ at the next position

    def _reply(self, response: Response) -> Reply:
        """What a completion response says (`dialect.parse`); an error status, a body cut short or one that holds no
        completion is a ServedError."""
        where = self.transport.where(self.dialect.path)
        data = self.transport.read_json(response, self.dialect.path)
        if not isinstance(data, dict):
            raise ServedError(f"{where}: expected a completion object, got {str(data)[:80]}")
        reply = self.dialect.parse(data)
        if not reply.answered:
            raise ServedError(f"{where}: the response has no completion (cut short?): {str(data)[:120]}")
        return reply

    def _top_logprobs(self, reply: Reply, prompt_tokens: int) -> dict[str, float]:
        """The next position's top log-probabilities in a reply, checked: the model answering is ours, the server
        counted the prompt tokens we sent, the log-probabilities are there."""
        where = self.transport.where(self.dialect.path)
        if reply.model is not None and reply.model != self.name:
            raise ServedError(f"{where} answered as model {reply.model!r}, not {self.name!r}: the server's model "
                              "changed during the run; serve the run's model again and resume")
        if reply.prompt_tokens is not None and reply.prompt_tokens != prompt_tokens:
            raise ServedError(f"{where} counted {reply.prompt_tokens} prompt tokens where we sent {prompt_tokens}: the "
                              f"server {self.dialect.misreading} (--model-args tokenizer=…)")
        if not reply.top:
            raise ServedError(f"{where} returned no log-probabilities; start the server with them on (llama-cpp-"
                              "python: --logits_all true; vLLM and llama-server return them when asked)")
        return reply.top

    async def _learn_keys(self, label_ids: Sequence[int]) -> None:
        """How a text-keyed response names each option (`TokenMap.learn`): the server's own detokenization where it
        has one (llama-cpp-python's /extras/detokenize), else our tokenizer's."""
        for token in label_ids:
            if token in self.tokens.keys:
                continue
            self.tokens.check_unique(token)
            response = await self.transport.request("POST", self.transport.root + "/extras/detokenize",
                                                    {"tokens": [token]}, retry=False)
            self.tokens.learn(token, response.json().get("text") if response.status_code == 200 else None)

    async def _top(self, ids: Sequence[int], count: int, label_ids: Sequence[int] = ()) -> dict[str, float]:
        """The top `count` log-probabilities (or, where the server honours `logprob_token_ids`, those of
        `label_ids`) at the position after the context `ids`, as the response keys them.

        A server that attaches log-probabilities to the generated token gives none when that token ends the
        sequence (llama-cpp-python); the request is then made again with the special tokens' sampling biased away
        (`logit_bias`, which there changes the draw of the one generated token, not the log-probabilities)."""
        prompt: list[int] | str = list(ids) if self.ids else self.tokenizer.decode(list(ids))
        body = self.dialect.body(prompt, count, label_ids, self.extensions)
        reply = self._reply(await self.transport.request("POST", self.dialect.path, body))
        if reply.ended_at_once:
            body["logit_bias"] = {str(token): -100 for token in self.tokenizer.all_special_ids}
            reply = self._reply(await self.transport.request("POST", self.dialect.path, body))
        return self._top_logprobs(reply, len(ids))

    async def _enough(self, ids: Sequence[int], top_count: TopCount, read: Callable[[dict[str, float]], T | None],
                      shortfall: Callable[[int, dict[str, float]], str], label_ids: Sequence[int] = ()) -> T:
        """`read` of the top `top_count` log-probabilities after the context `ids`, that count raised until `read`
        gives a value; past `max_logprobs` a ServedError saying `shortfall` of the last count and response."""
        while True:
            asked = top_count.count
            top = await self._top(ids, asked, label_ids)
            value = read(top)
            if value is not None:
                return value
            if asked >= self.max_logprobs:
                raise ServedError(shortfall(asked, top))
            top_count.raise_from(asked)

    async def _theta(self, ids: tuple[int, ...], label_ids: Sequence[int]) -> torch.Tensor:
        """ℓ of the options [K] after the context `ids`."""
        def read(top: dict[str, float]) -> torch.Tensor | None:
            found = self.tokens.options(top, label_ids)
            return torch.tensor(found, dtype=torch.float32) if all(v is not None for v in found) else None

        def shortfall(asked: int, top: dict[str, float]) -> str:
            found = self.tokens.options(top, label_ids)
            missing = [self.tokenizer.decode([t]) for t, v in zip(label_ids, found, strict=True) if v is None]
            return (f"the server's top {asked} log-probabilities leave out the option(s) {missing}; let it return more "
                    "(vLLM: --max-logprobs, or a version with logprob_token_ids) and raise --model-args "
                    "max_logprobs=…")

        return await self._enough(ids, self.option_top, read, shortfall, label_ids)

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
                              f"with --model-args tokenizer=…{self.dialect.remedy}")

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
            values = self._run(self._gather(list(todo.values()), list(todo), label_ids))
            if len(self._cache) + len(todo) > CACHED_CONTEXTS:
                self._cache.clear()
            self._cache.update(zip(todo, values, strict=True))
        return torch.stack([self._cache[c] for c in contexts]) if contexts else torch.empty(0, len(label_ids))

    def _run(self, coroutine: Awaitable[T]) -> T:
        """`coroutine`'s result on the transport; where one of its requests needed a retry (the server may have
        restarted), only once `check_model` found the same model."""
        self.transport.retried = self.transport.reconnected = False
        result = self.transport.run(coroutine)
        if self.transport.retried:
            self.check_model(probe=self.transport.reconnected)
        return result

    def check_model(self, probe: bool) -> None:
        """The server still serves the model we connected to: it describes itself as then (a restarted server may
        serve another), and (with `probe`: after a connection failed, as a restart makes it) answers the probe of
        `_probe` as then, each log-probability within `PROBE_TOLERANCE` (a model swapped under the same name does
        not). (The probe is not asked after every retry: a server whose numbers depend on its cache, as llama.cpp's
        do, computes the next context otherwise after it.)"""
        changed = "the served model changed during the run; serve the run's model again and resume"
        try:
            _, facts = self.transport.run(server_facts(self.transport, self.name))
        except ServedError as err:
            raise ServedError(f"{changed} ({err})") from None
        if facts != self.facts:
            raise ServedError(f"{self.transport.url} now reports {facts}, not {self.facts}: {changed}")
        if not probe:
            return
        body, prompt_tokens, then = self._probe_answer
        now = self.transport.run(self.transport.request("POST", self.dialect.path, body))
        top = self._top_logprobs(self._reply(now), prompt_tokens)
        shared = then.keys() & top.keys()
        moved = max((abs(then[key] - top[key]) for key in shared), default=float("inf"))
        if len(shared) < min(len(then), len(top)) / 2 or moved > PROBE_TOLERANCE:
            raise ServedError(f"{self.transport.url} answers the probe {self.dialect.probe_text()!r} otherwise than at "
                              f"the start (top log-probabilities {_rounded(then)}, now {_rounded(top)}): {changed}")

    # ------------------------------------------------------------------ generation (cot): next-token logits

    async def _next_logits(self, ids: Sequence[int], nucleus: Nucleus) -> torch.Tensor:
        """`nucleus_logits` after the context `ids`."""
        temperature, top_p, banned = nucleus

        def read(top: dict[str, float]) -> torch.Tensor | None:
            tokens, logprobs = self.tokens.ids(top)
            return nucleus_logits(tokens, logprobs, len(self.tokenizer), temperature, top_p, banned)

        def shortfall(asked: int, top: dict[str, float]) -> str:
            return (f"the server's top {asked} log-probabilities do not determine the nucleus of --temperature "
                    f"{nucleus[0]:g} --top-p {nucleus[1]:g}; let it return more (vLLM: --max-logprobs) and raise "
                    "--model-args max_logprobs=…, or lower --top-p")

        return await self._enough(ids, self.draw_top, read, shortfall)

    def next_logits(self, contexts: Sequence[Sequence[int]], nucleus: Nucleus) -> torch.Tensor:
        """`nucleus_logits` [B, vocab] after every context, all requested at once (the generated tokens' text is held
        to our ids by every response's prompt-token count)."""
        async def every() -> list[torch.Tensor]:
            return await asyncio.gather(*(self._next_logits(c, nucleus) for c in contexts))

        rows = self._run(every())
        return torch.stack(rows) if rows else torch.empty(0, len(self.tokenizer))

    @property
    def generation_logprobs(self) -> int:
        """How many top log-probabilities a rollout's request asks for now."""
        return self.draw_top.count

    def check_rollout_prompt(self, prompt_ids: Sequence[int]) -> None:
        """Text prompts only: the server reads a rollout's prompt as our ids (asked once per prompt)."""
        if not self.ids and self.tokenize_path and tuple(prompt_ids) not in self._checked:
            self.transport.run(self._check_ids(list(prompt_ids)))
            self._checked.add(tuple(prompt_ids))


def _rounded(top: dict[str, float]) -> str:
    """The top log-probabilities `top` in an error line: the first few, to 3 decimals."""
    return "{" + ", ".join(f"{key!r}: {value:.3f}" for key, value in list(top.items())[:PROBE_LOGPROBS]) + "}"
