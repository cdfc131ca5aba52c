"""The completions API (`/v1/completions`), the dialect every other overrides: the body of a one-token request for the
log-probabilities at the next position (of one prompt, or of several where the server takes a list), and what a
response says (`parse`), every log-probability checked before it can become θ. The prompt goes as our token ids where
the server takes them, else as text, which the server's tokenize endpoint must read as our ids.

Responses name the top tokens in two shapes: OpenAI's `logprobs.top_logprobs[0]` ({key: ℓ}; vLLM, SGLang,
llama-cpp-python) and the chat shape `logprobs.content[0].top_logprobs` ([{token, logprob, id?}]; every chat endpoint,
and llama-server's completions too). A token is named by its id where the response gives one (llama-server's `id`,
vLLM's "token_id:N" keys), else by its text."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

#: How a response keyed by token id names a token: "token_id:N" (vLLM's `return_tokens_as_token_ids`).
TOKEN_ID_KEY = "token_id:"
#: The float32 machine epsilon: a softmax normalised in float32 over V tokens sums to 1 within (V − 1)·ε.
FLOAT32_EPS = 2.0**-23
#: A token as a response names it: its id, or (where the response gives none) its text.
Key = int | str


class Malformed(ValueError):
    """A response that cannot be read as a completion with log-probabilities (the message says what is wrong)."""


@dataclass(frozen=True)
class Choice:
    """One prompt's completion: the top log-probabilities at the first generated position keyed as the response names
    tokens (None: it gave none), the text generated and why generation stopped."""

    top: dict[Key, float] | None
    text: str | None = None
    finish_reason: str | None = None

    @property
    def ended_at_once(self) -> bool:
        """Whether nothing was generated: the one token ended the sequence (a server that attaches log-probabilities
        to the generated token then gives none)."""
        return not self.text and self.finish_reason == "stop" and not self.top


@dataclass(frozen=True)
class Reply:
    """What a response says: the model that answered, the prompt tokens the server counted, and each prompt's
    completion in the order the prompts were sent (none: the response was cut short)."""

    model: str | None
    prompt_tokens: int | None
    choices: tuple[Choice, ...]


def _count(value: Any, name: str) -> int | None:
    """`value` as a count (None where absent); anything but a whole number ≥ 0 is Malformed."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Malformed(f"{name} is {str(value)[:40]!r}, not a whole number")
    return value


class Completions:
    """The completions dialect: a one-token request (`body`) and its response (`parse`) for the model served as
    `model`, whose prompts our `tokenizer` writes."""

    api = "completions"
    path = "/completions"
    #: Whether prompts may go as token ids (else as text, always).
    token_ids = True
    #: Whether a text prompt needs the server's tokenize endpoint to be checked (else the prompt-token counts do).
    tokenize_required = True
    #: What a prompt-token count other than ours says about the server.
    misreading = "does not read the prompt as our tokenizer does"
    #: How to give the server our tokens when its tokenization differs.
    remedy = ", or serve it where token-id prompts are accepted"

    def __init__(self, model: str, tokenizer: PreTrainedTokenizerBase):
        self.model = model
        self.tokenizer = tokenizer
        #: The most a response's probabilities may sum past 1: a float32 softmax over the vocabulary's rounding.
        self.rounding = (len(tokenizer) - 1) * FLOAT32_EPS

    def body(self, prompt: list[int] | list[list[int]] | str, logprobs: int, label_ids: Sequence[int],
             extensions: bool) -> dict:
        """A request for the top `logprobs` log-probabilities after `prompt` (token ids, a list of several prompts'
        ids, or text; with vLLM's `extensions`: tokens named by id, and those of `label_ids` asked for by id); greedy,
        one token, nothing echoed."""
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0,
                                "logprobs": logprobs, "echo": False, "stream": False}
        return self._extended(body, label_ids) if extensions else body

    @staticmethod
    def _extended(body: dict[str, Any], label_ids: Sequence[int]) -> dict[str, Any]:
        """`body` with vLLM's fields: token ids as keys (`return_tokens_as_token_ids`), the options' log-probabilities
        asked for by id (`logprob_token_ids`)."""
        body["return_tokens_as_token_ids"] = True
        if label_ids:
            body["logprob_token_ids"] = list(label_ids)
        return body

    def parse(self, data: Any) -> Reply:
        """What the response object `data` says, its choices in prompt order (`index`). A log-probability that is not
        a finite number ≤ 0, a token given twice, probabilities summing past 1 (beyond float32 rounding), a count that
        is not a whole number, or a part of another type than the APIs write, is Malformed."""
        if not isinstance(data, dict):
            raise Malformed(f"expected a completion object, got {str(data)[:80]}")
        model, usage, choices = data.get("model"), data.get("usage"), data.get("choices")
        if usage is not None and not isinstance(usage, dict):
            raise Malformed(f"usage is {str(usage)[:40]!r}, not an object")
        counted = _count((usage or {}).get("prompt_tokens"), "usage.prompt_tokens")
        if not isinstance(choices, list) or not choices:
            return Reply(None if model is None else str(model), counted, ())
        if not all(isinstance(choice, dict) for choice in choices):
            raise Malformed(f"choices holds {str(choices)[:60]}, not completion objects")
        indexes = [choice.get("index") for choice in choices]
        if all(isinstance(i, int) and not isinstance(i, bool) for i in indexes):
            choices = [choice for _, choice in sorted(zip(indexes, choices, strict=True), key=lambda pair: pair[0])]
        return Reply(None if model is None else str(model), counted,
                     tuple(Choice(self._top(choice), self.text(choice), choice.get("finish_reason"))
                           for choice in choices))

    def _top(self, choice: Mapping[str, Any]) -> dict[Key, float] | None:
        """A choice's log-probabilities at its first generated position, checked (`parse`); None where it has none."""
        logprobs = choice.get("logprobs")
        if logprobs is None:
            return None
        if not isinstance(logprobs, dict):
            raise Malformed(f"logprobs is {str(logprobs)[:40]!r}, not an object")
        if logprobs.get("content") is not None:  # the chat shape: [{token, logprob, id?, top_logprobs: [...]}]
            content = logprobs["content"]
            if not isinstance(content, list):
                raise Malformed(f"logprobs.content is {str(content)[:40]!r}, not a list")
            if not content:
                return None
            if not isinstance(content[0], dict) or not isinstance(content[0].get("top_logprobs"), list):
                raise Malformed(f"logprobs.content[0] is {str(content[0])[:60]}, not a token with top_logprobs")
            entries = content[0]["top_logprobs"]
            if not all(isinstance(entry, dict) for entry in entries):
                raise Malformed(f"top_logprobs holds {str(entries)[:60]}, not {{token, logprob}} objects")
            pairs = [(self._entry_key(entry), entry.get("logprob")) for entry in entries]
        else:  # OpenAI's completions shape: top_logprobs = [{key: ℓ}, ...], one per generated token
            top = logprobs.get("top_logprobs")
            if top is None or top == []:
                return None
            if not isinstance(top, list) or not (top[0] is None or isinstance(top[0], dict)):
                raise Malformed(f"logprobs.top_logprobs is {str(top)[:60]}, not a list of {{token: logprob}}")
            pairs = [(self._key(key), value) for key, value in (top[0] or {}).items()]
        return self._checked(pairs) or None

    @staticmethod
    def _key(key: str) -> Key:
        """A dict key: "token_id:N" as the id N, anything else as text."""
        if not key.startswith(TOKEN_ID_KEY):
            return key
        number = key[len(TOKEN_ID_KEY):]
        if not (number.isascii() and number.isdigit()):
            raise Malformed(f"the key {key[:40]!r} names no token id (expected token_id:N)")
        return int(number)

    @classmethod
    def _entry_key(cls, entry: Mapping[str, Any]) -> Key:
        """An entry's token: its `id` (llama-server) where given, else its `token` text (or "token_id:N")."""
        token_id = entry.get("id")
        if token_id is not None:
            if isinstance(token_id, bool) or not isinstance(token_id, int) or token_id < 0:
                raise Malformed(f"a token id is {str(token_id)[:40]!r}, not a whole number")
            return token_id
        token = entry.get("token")
        if not isinstance(token, str):
            raise Malformed(f"a top log-probability names its token as {str(token)[:40]!r}, not as text or id")
        return cls._key(token)

    def _checked(self, pairs: list[tuple[Key, Any]]) -> dict[Key, float]:
        """{key: ℓ} of the (key, value) pairs of one position, each ℓ a finite number ≤ 0 (to float32 rounding),
        each id once, Σ exp(ℓ) ≤ 1 + `rounding`. A text given twice is several tokens' text (kept once, the first)."""
        top: dict[Key, float] = {}
        mass = 0.0
        for key, value in pairs:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise Malformed(f"the log-probability of {key!r} is {str(value)[:40]!r}, not a number")
            if not math.isfinite(value):
                raise Malformed(f"the log-probability of {key!r} is {value}, not a finite number")
            if value > math.log1p(self.rounding):
                raise Malformed(f"the log-probability of {key!r} is {value:g} > 0")
            if key in top and isinstance(key, int):
                raise Malformed(f"the token {key} is given twice")
            top.setdefault(key, float(value))
            mass += math.exp(value)
        if mass > 1 + self.rounding:
            raise Malformed(f"the top log-probabilities' probabilities sum to {mass:.6g} > 1")
        return top

    @staticmethod
    def text(choice: Mapping[str, Any]) -> str | None:
        """The text a choice generated."""
        text = choice.get("text")
        return text if isinstance(text, str) else None

    def misread(self, text: str, counted: int) -> str:
        """What a count of `counted` prompt tokens for the prompt `text` (not our count) says about the server."""
        return (f"the server {self.misreading}; name the model's own tokenizer with --model-args tokenizer=…"
                f"{self.remedy}")

    def probe_text(self) -> str:
        """A short prompt to try the server's forms with."""
        return "Hello"

    def tokenize_paths(self, root: str) -> tuple[str, ...]:
        """Where a text prompt may be tokenized as the server's completions read it (below the server's `root`):
        /tokenize (vLLM, llama-server, SGLang), /v1/tokenize (SGLang), /extras/tokenize (llama-cpp-python)."""
        return root + "/tokenize", "/tokenize", root + "/extras/tokenize"

    def tokenize_body(self, path: str, text: str) -> dict[str, Any]:
        """The request to `path` for the server's token ids of the prompt `text` (vLLM and SGLang read `prompt`,
        llama-server `content`, adding the special tokens its completions add, llama-cpp-python `input`)."""
        if path.endswith("/extras/tokenize"):
            return {"input": text}
        return {"model": self.model, "prompt": text, "content": text, "add_special": True}
