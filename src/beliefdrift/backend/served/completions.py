"""The completions API (`/v1/completions`), the dialect every other overrides: the body of a one-token request for the
log-probabilities at the next position, and what a response says (`parse`). The prompt goes as our token ids where
the server takes them, else as text, which the server's tokenize endpoint must read as our ids."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class Reply:
    """What a response says: the model that answered, the prompt tokens the server counted, whether it holds a
    completion (`answered`; else it was cut short), the top log-probabilities at the first generated position keyed
    as the server names tokens (None: it gave none), the text generated and why generation stopped."""

    model: str | None
    prompt_tokens: int | None
    answered: bool
    top: dict[str, float] | None = None
    text: str | None = None
    finish_reason: str | None = None

    @property
    def ended_at_once(self) -> bool:
        """Whether nothing was generated: the one token ended the sequence (a server that attaches log-probabilities
        to the generated token then gives none)."""
        return not self.text and self.finish_reason == "stop" and not self.top


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

    def body(self, prompt: list[int] | str, logprobs: int, label_ids: Sequence[int], extensions: bool) -> dict:
        """A request for the top `logprobs` log-probabilities after `prompt` (with vLLM's `extensions`: tokens named
        by id, and those of `label_ids` asked for by id); greedy, one token, nothing echoed."""
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

    def parse(self, data: Mapping[str, Any]) -> Reply:
        """What the response object `data` says."""
        model, counted = data.get("model"), (data.get("usage") or {}).get("prompt_tokens")
        try:
            choice = data["choices"][0]
        except (KeyError, IndexError, TypeError):
            return Reply(model, counted, answered=False)
        finish = choice.get("finish_reason") if isinstance(choice, dict) else None
        return Reply(model, counted, True, self.top_logprobs(choice), self.text(choice), finish)

    @staticmethod
    def top_logprobs(choice: Any) -> dict[str, float] | None:
        """A choice's `logprobs.top_logprobs[0]` ({token: ℓ}); None where it has none."""
        logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
        top = logprobs.get("top_logprobs") if isinstance(logprobs, dict) else None
        return top[0] if isinstance(top, list) and top and isinstance(top[0], dict) and top[0] else None

    @staticmethod
    def text(choice: Any) -> str | None:
        """The text a choice generated."""
        return choice.get("text") if isinstance(choice, dict) else None

    def probe_text(self) -> str:
        """A short prompt to try the server's forms with."""
        return "Hello"

    def tokenize_paths(self, root: str) -> tuple[str, ...]:
        """Where a text prompt may be tokenized as the server's completions read it: llama-cpp-python's
        /extras/tokenize (below the server's `root`), or /tokenize (vLLM, llama.cpp, SGLang)."""
        return root + "/extras/tokenize", "/tokenize"

    def tokenize_body(self, path: str, text: str) -> dict[str, Any]:
        """The request to `path` for the server's token ids of the prompt `text`."""
        if path.endswith("/extras/tokenize"):
            return {"input": text}
        return {"model": self.model, "prompt": text, "content": text}
