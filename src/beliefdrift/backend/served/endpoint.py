"""One served model as the engine reaches it (`Endpoint`): what the server accepts, asked once; the options'
log-probabilities after each answer path's context; the top log-probabilities after each rollout's context.

ℓ of exactly the K option tokens is read from the response: vLLM's `logprob_token_ids` (the listed ids'
log-probabilities) where the server honours it, else its top log-probabilities: every context asked for the first
count (`--model-args logprobs`), a context whose response leaves an option out asked again for 8 times as many, up to
the most the server gives (`max_logprobs`, or the cap its refusal states: vLLM's `--max-logprobs`); an option still
missing is an error naming the settings, never a zero. How many a context is asked for depends on that context alone,
never on what the run asked before, so a resumed run asks what an uninterrupted one asked. Every log-probability is
checked before it becomes θ (`Completions.parse`). The prompt is sent as our token ids where the server accepts
token-id prompts (vLLM, SGLang, llama.cpp's llama-server), several prompts to a request where it takes a list of them;
otherwise as text, and then the server's tokenization of every prompt (with a list of every answer after it) must
equal our ids (its tokenize endpoint), and every response's prompt-token count the count of ids we meant. After a
request needed a retry, the server's model is checked again.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, TypeVar

import torch

from beliefdrift.backend.answer_tokens import AnswerTokens
from beliefdrift.backend.sampling import nucleus_logits
from beliefdrift.backend.served.completions import Choice, Key, Malformed, Reply
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
#: How many times as many top log-probabilities a context is asked for again when they leave out what it needs.
GROWTH = 8
#: Refusals that state the most top log-probabilities a server gives: vLLM's (`--max-logprobs`), SGLang's (its
#: vocabulary).
CAP_REFUSALS = (re.compile(r"greater than max allowed: (\d+)"), re.compile(r"top_logprobs_num must be in \[0, (\d+)\]"))
#: Where llama-server renders a conversation as its chat completions do, then tokenized at its /tokenize.
RENDER_PATH = "/apply-template"
#: The owner llama.cpp's server lists its models under (/v1/models). Its prompt cache holds the prompts it evaluated,
#: and a prompt asked again is evaluated from its last token alone, which rounds otherwise than the batch it was first
#: evaluated in (ℓ 0.05 apart, measured): a context asked again for more top log-probabilities goes with
#: `cache_prompt: false` there, evaluated whole.
LLAMA_CPP = "llamacpp"
T = TypeVar("T")
#: (temperature, top_p, banned token ids): the sampler a rollout's next token is drawn with (`nucleus_logits`).
Nucleus = tuple[float, float, Sequence[int]]


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
    length = facts.get("max_model_len")
    if length is not None and (isinstance(length, bool) or not isinstance(length, int) or length < 1):
        raise ServedError(f"{transport.url}/models: max_model_len is {str(length)[:40]!r}, not a whole number of "
                          "tokens")
    version = await transport.optional(transport.root + "/version")
    if isinstance(version, dict) and "version" in version:
        facts["version"] = version["version"]
    props = await transport.optional(transport.root + "/props")
    if isinstance(props, dict):
        facts |= {key: props[key] for key in PROPS_FACTS if props.get(key) is not None}
    return wanted, facts


@dataclass(frozen=True)
class Accepted:
    """What the server accepts, asked once when connecting (`Endpoint._probe`): token-id prompts (`ids`), vLLM's
    fields naming tokens by id and asking for the options by id (`extensions`), responses naming tokens by id
    (`id_keys`), several token-id prompts in one request (`several`; `usage_first`: its usage counts the first prompt
    only, as llama-server's does, not their sum), and where text prompts are tokenized to be checked
    (`tokenize_path`)."""

    ids: bool
    extensions: bool
    id_keys: bool
    several: bool = False
    usage_first: bool = False
    tokenize_path: str | None = None


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
        self.first_count = min(options.logprobs, self.max_logprobs)  # what every context is asked for first
        self.server_cap: int | None = None  # the most top log-probabilities the server's refusal stated
        self._cache: dict[tuple[int, ...], torch.Tensor] = {}  # the options' ℓ after a context (bounded)
        self._checked: set[tuple[int, ...]] = set()  # prompts whose tokenization the server confirmed (text prompts)
        self.dialect = options.dialect(self.name, self.tokenizer)
        self.accepted = Accepted(ids=False, extensions=False, id_keys=False)  # until the probe has asked
        self.accepted = self.transport.run(self._probe())

    @property
    def prompt_check(self) -> str:
        """How the server is held to reading our tokens (in the run identity): our ids sent as they are, or text whose
        tokenization at a route of the server is compared with our ids, or text whose prompt-token counts alone are
        compared with ours."""
        if self.accepted.ids:
            return "token ids"
        path = self.accepted.tokenize_path
        where = self.transport.where(path).removeprefix(self.transport.root) if path else None
        return f"{self.dialect.api} text, tokenized at {where}" if where else f"{self.dialect.api} text, counted"

    # ------------------------------------------------------------------ what the server accepts, asked once

    async def _probe(self) -> Accepted:
        """What the server accepts: one-token completions of a short prompt, in the most exact form the server
        accepts (a refusal of a form, even as a 5xx, moves on to the next; the last is retried). A server that takes
        neither token ids nor has a tokenize endpoint (where the dialect needs one), reads the prompt otherwise than
        we do, or answers without log-probabilities, is a ServedError."""
        ids = self.tokenizer(self.dialect.probe_text(), add_special_tokens=False)["input_ids"]
        refused = ""
        tokenize_path = None
        forms = (((True, True), (True, False)) if self.dialect.token_ids else ()) + ((False, True), (False, False))
        for as_ids, extensions in forms:
            if not as_ids and tokenize_path is None:
                tokenize_path = await self._tokenize_path(ids)
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
            (choice,) = self._choices(self._reply(response), [tuple(ids)])
            self._probe_answer = (body, tuple(ids), choice.top or {})  # asked again after a reconnect (`check_model`)
            several, usage_first = await self._several(ids, extensions) if as_ids else (False, False)
            return Accepted(as_ids, extensions, keyed_by_id(choice.top or {}), several, usage_first, tokenize_path)
        raise AssertionError("unreachable: the last form returns or raises")

    async def _several(self, ids: list[int], extensions: bool) -> tuple[bool, bool]:
        """(whether the server answers a list of two token-id prompts with a completion of each, in order; whether
        its usage then counts the first prompt's tokens only). A refusal, or any other answer, is no."""
        prompts = [ids, ids + ids]
        response = await self.transport.request("POST", self.dialect.path,
                                                self.dialect.body(prompts, 1, (), extensions), retry=False)
        if response.status_code != 200:
            return False, False
        try:
            reply = self.dialect.parse(response.json())
        except ValueError:  # not JSON, or Malformed: the probe's single prompt decides what is read
            return False, False
        if len(reply.choices) != 2 or not all(choice.top for choice in reply.choices):
            return False, False
        if reply.prompt_tokens in (None, 3 * len(ids)):
            return True, False
        return reply.prompt_tokens == len(ids), reply.prompt_tokens == len(ids)

    async def _tokenize_path(self, ids: list[int]) -> str | None:
        """The first of the dialect's tokenize endpoints that tokenizes the probe's text, `ids`, at all (a 404, an
        error or an empty list is no such endpoint); None where there is none. One that gives other ids than ours is
        a ServedError (`_check_ids`)."""
        for path in self.dialect.tokenize_paths(self.transport.root):
            try:
                theirs = await self._tokenize(path, self.tokenizer.decode(ids))
            except ServedError:
                continue
            if theirs:
                self._compare(theirs, ids)
                return path
        return None

    async def _tokenize(self, path: str, text: str) -> list[int]:
        """The server's token ids of `text` (as its completions read a text prompt; for chat requests, as it renders
        the conversation `text` is: llama-server renders it at `RENDER_PATH`, then tokenizes the rendering)."""
        answer = await self.transport.json("POST", path, self.dialect.tokenize_body(path, text))
        if path.endswith(RENDER_PATH):
            rendered = answer.get("prompt") if isinstance(answer, dict) else None
            if not isinstance(rendered, str):
                raise ServedError(f"{path}: no rendered prompt in its answer")
            path = path.removesuffix(RENDER_PATH) + "/tokenize"
            answer = await self.transport.json("POST", path, {"content": rendered, "add_special": True})
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise ServedError(f"{path}: no token list in its answer")
        return tokens

    # ------------------------------------------------------------------ one request: ℓ at the next positions

    def _reply(self, response: Response) -> Reply:
        """What a completion response says (`dialect.parse`); an error status, a body cut short or one that holds no
        completion, or that `parse` finds Malformed, is a ServedError."""
        where = self.transport.where(self.dialect.path)
        try:
            reply = self.dialect.parse(self.transport.read_json(response, self.dialect.path))
        except Malformed as err:
            raise ServedError(f"{where}: not a completion with log-probabilities: {err}") from None
        if not reply.choices:
            raise ServedError(f"{where}: the response has no completion (cut short?): {response.text[:120]}")
        return reply

    def _choices(self, reply: Reply, contexts: Sequence[tuple[int, ...]]) -> tuple[Choice, ...]:
        """The completions of `contexts` in a reply, checked: the model answering is ours, the server counted the
        prompt tokens we sent (the first prompt's alone where its usage counts that), one completion per prompt, each
        with log-probabilities."""
        where = self.transport.where(self.dialect.path)
        if reply.model is not None and reply.model != self.name:
            raise ServedError(f"{where} answered as model {reply.model!r}, not {self.name!r}: the server's model "
                              "changed during the run; serve the run's model again and resume")
        sent = len(contexts[0]) if self.accepted.usage_first else sum(len(c) for c in contexts)
        if reply.prompt_tokens is not None and reply.prompt_tokens != sent:
            text = self.tokenizer.decode(list(contexts[0]))
            raise ServedError(f"{where} counted {reply.prompt_tokens} prompt tokens where we sent {sent}: "
                              f"{self.dialect.misread(text, reply.prompt_tokens)}")
        if len(reply.choices) != len(contexts):
            raise ServedError(f"{where} answered {len(reply.choices)} completions to {len(contexts)} prompts")
        if not all(choice.top for choice in reply.choices):
            raise ServedError(f"{where} returned no log-probabilities; start the server with them on (llama-cpp-"
                              "python: --logits_all true; vLLM and llama-server return them when asked)")
        return reply.choices

    async def _learn_keys(self, label_ids: Sequence[int]) -> None:
        """How a text-keyed response names each option (`TokenMap.learn`): the server's own detokenization where it
        has one (llama-cpp-python's /extras/detokenize), else our tokenizer's."""
        for token in label_ids:
            if token in self.tokens.keys:
                continue
            self.tokens.check_unique(token)
            response = await self.transport.request("POST", self.transport.root + "/extras/detokenize",
                                                    {"tokens": [token]}, retry=False)
            text = response.json().get("text") if response.status_code == 200 else None
            self.tokens.learn(token, text)

    def _cap(self, response: Response) -> int | None:
        """The most top log-probabilities the server gives, where `response` refuses a request for stating it."""
        if response.status_code != 400:
            return None
        found = next((m for pattern in CAP_REFUSALS if (m := pattern.search(response.text))), None)
        return int(found.group(1)) if found else None

    async def _request(self, contexts: Sequence[tuple[int, ...]], count: int,
                       label_ids: Sequence[int]) -> tuple[int, list[dict[Key, float]]]:
        """(the count asked, the top log-probabilities after each context) from one request (several prompts where
        the server takes them, else one): the top `count`, or where the server honours `logprob_token_ids` those of
        `label_ids`. A refusal stating the server's cap is learned (`max_logprobs` lowered to it) and the request
        made again within it. A context asked again (`count` past the first) skips llama-server's cache (`LLAMA_CPP`).

        A server that attaches log-probabilities to the generated token gives none when that token ends the
        sequence (llama-cpp-python); the request is then made again with the special tokens' sampling biased away
        (`logit_bias`, which there changes the draw of the one generated token, not the log-probabilities)."""
        asked = min(count, self.max_logprobs)
        ids = [list(c) for c in contexts]
        prompt: list[int] | list[list[int]] | str = (
            (ids if len(ids) > 1 else ids[0]) if self.accepted.ids else self.tokenizer.decode(ids[0]))
        body = self.dialect.body(prompt, asked, label_ids, self.accepted.extensions)
        if count > self.first_count and self.facts.get("owned_by") == LLAMA_CPP:
            body["cache_prompt"] = False  # asked again: evaluated whole, not its last token alone from the cache
        response = await self.transport.request("POST", self.dialect.path, body)
        cap = self._cap(response)
        if cap is not None and cap < asked:
            self.server_cap = cap
            self.max_logprobs = min(self.max_logprobs, cap)
            return await self._request(contexts, count, label_ids)
        reply = self._reply(response)
        if any(choice.ended_at_once for choice in reply.choices):
            body["logit_bias"] = {str(token): -100 for token in self.tokenizer.all_special_ids}
            reply = self._reply(await self.transport.request("POST", self.dialect.path, body))
        return asked, [choice.top or {} for choice in self._choices(reply, contexts)]

    async def _read_all(self, contexts: Sequence[tuple[int, ...]], read: Callable[[dict[Key, float]], T | None],
                        shortfall: Callable[[int, dict[Key, float]], str], label_ids: Sequence[int] = ()) -> list[T]:
        """`read` of the top log-probabilities after each context: every context asked for `first_count`, those
        whose `read` gives None asked again for `GROWTH` times as many, and so on; one that `max_logprobs` leaves
        wanting is a ServedError saying `shortfall` of its count and response. Contexts go `batch_size` to a request
        where the server takes several, in the order of their ids: a server that keeps one sequence per slot
        (llama.cpp's) then evaluates only what follows the prefix a context shares with the one before (with the
        order given, the paths of several questions alternate, each switch re-evaluating a question)."""
        values: dict[int, T] = {}
        todo, count = sorted(range(len(contexts)), key=contexts.__getitem__), self.first_count
        size = self.options.batch_size if self.accepted.several else 1
        while todo:
            chunks = [todo[i:i + size] for i in range(0, len(todo), size)]
            answers = await asyncio.gather(*(self._request([contexts[i] for i in chunk], count, label_ids)
                                             for chunk in chunks))
            wanting = []
            for chunk, (asked, tops) in zip(chunks, answers, strict=True):
                for i, top in zip(chunk, tops, strict=True):
                    value = read(top)
                    if value is None and asked >= self.max_logprobs:
                        raise ServedError(shortfall(asked, top))
                    if value is None:
                        wanting.append(i)
                    else:
                        values[i] = value
            todo, count = wanting, count * GROWTH
        return [values[i] for i in range(len(contexts))]

    def _more(self) -> str:
        """How to let the server give more top log-probabilities."""
        stated = f"it gives at most {self.server_cap}; " if self.server_cap == self.max_logprobs else ""
        return (f"{stated}let it return more (vLLM: --max-logprobs N, or a release with logprob_token_ids) and raise "
                "--model-args max_logprobs=N")

    async def _thetas(self, contexts: Sequence[tuple[int, ...]], label_ids: Sequence[int]) -> list[torch.Tensor]:
        """ℓ of the options [K] after each context."""
        def read(top: dict[Key, float]) -> torch.Tensor | None:
            found = self.tokens.options(top, label_ids)
            return torch.tensor(found, dtype=torch.float32) if all(v is not None for v in found) else None

        def shortfall(asked: int, top: dict[Key, float]) -> str:
            found = self.tokens.options(top, label_ids)
            missing = [self.tokenizer.decode([t]) for t, v in zip(label_ids, found, strict=True) if v is None]
            return f"the server's top {asked} log-probabilities leave out the option(s) {missing}; {self._more()}"

        return await self._read_all(contexts, read, shortfall, label_ids)

    async def _check_prompt(self, tokens: AnswerTokens) -> None:
        """Text prompts only: the server's tokenization of the prompt, followed by every answer (and the first again)
        where answers follow one another, must be our ids."""
        sequence = [*range(len(tokens.label_ids)), 0] if tokens.delimiter_ids else []
        await self._check_ids(list(tokens.prompt_ids) + [t for i in sequence for t in tokens.answer_ids(i)])

    async def _check_ids(self, ids: list[int]) -> None:
        """Text prompts only: the server's tokenization of the text of `ids` must be `ids`."""
        assert self.accepted.tokenize_path is not None
        self._compare(await self._tokenize(self.accepted.tokenize_path, self.tokenizer.decode(ids)), ids)

    def _compare(self, theirs: list[int], ids: list[int]) -> None:
        """The server's tokenization `theirs` of the text of `ids` is `ids` (else a ServedError naming where they part
        and, for a conversation, what the server rendered instead)."""
        if theirs == ids:
            return
        at = next((i for i, (a, b) in enumerate(zip(theirs, ids, strict=False)) if a != b), min(len(ids), len(theirs)))
        cause = self.dialect.misread(self.tokenizer.decode(ids), len(theirs))
        raise ServedError(f"the server tokenizes the prompt differently from our tokenizer (first difference at token "
                          f"{at}: {theirs[at:at + 3]} vs {ids[at:at + 3]}): {cause}")

    async def _gather(self, prompts: Sequence[AnswerTokens], contexts: Sequence[tuple[int, ...]],
                      label_ids: Sequence[int]) -> list[torch.Tensor]:
        if not self.accepted.id_keys:
            await self._learn_keys(label_ids)
        checks = {} if self.accepted.ids or not self.accepted.tokenize_path else {
            t.prompt_ids: t for t in prompts if t.prompt_ids not in self._checked}
        await asyncio.gather(*(self._check_prompt(t) for t in checks.values()))
        self._checked.update(checks)
        return await self._thetas(contexts, label_ids)

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

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
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
        body, ids, then = self._probe_answer
        now = self.transport.run(self.transport.request("POST", self.dialect.path, body))
        (choice,) = self._choices(self._reply(now), [ids])
        top = choice.top or {}
        shared = then.keys() & top.keys()
        moved = max((abs(then[key] - top[key]) for key in shared), default=float("inf"))
        if len(shared) < min(len(then), len(top)) / 2 or moved > PROBE_TOLERANCE:
            raise ServedError(f"{self.transport.url} answers the probe {self.dialect.probe_text()!r} otherwise than at "
                              f"the start (top log-probabilities {_rounded(then)}, now {_rounded(top)}): {changed}")

    # ------------------------------------------------------------------ generation (cot): next-token logits

    def next_logits(self, contexts: Sequence[Sequence[int]], nucleus: Nucleus) -> torch.Tensor:
        """`nucleus_logits` [B, vocab] after every context, all requested at once (the generated tokens' text is held
        to our ids by every response's prompt-token count)."""
        temperature, top_p, banned = nucleus

        def read(top: dict[Key, float]) -> torch.Tensor | None:
            tokens, logprobs = self.tokens.ids(top)
            return nucleus_logits(tokens, logprobs, len(self.tokenizer), temperature, top_p, banned)

        def shortfall(asked: int, top: dict[Key, float]) -> str:
            return (f"the server's top {asked} log-probabilities do not determine the nucleus of --temperature "
                    f"{temperature:g} --top-p {top_p:g}; {self._more()}, or lower --top-p")

        rows = self._run(self._read_all([tuple(c) for c in contexts], read, shortfall))
        return torch.stack(rows) if rows else torch.empty(0, len(self.tokenizer))

    def check_rollout_prompt(self, prompt_ids: Sequence[int]) -> None:
        """Text prompts only: the server reads a rollout's prompt as our ids (asked once per prompt)."""
        if not self.accepted.ids and self.accepted.tokenize_path and tuple(prompt_ids) not in self._checked:
            self.transport.run(self._check_ids(list(prompt_ids)))
            self._checked.add(tuple(prompt_ids))


def _rounded(top: dict[Key, float]) -> str:
    """The top log-probabilities `top` in an error line: the first few, to 3 decimals."""
    return "{" + ", ".join(f"{key!r}: {value:.3f}" for key, value in list(top.items())[:PROBE_LOGPROBS]) + "}"
