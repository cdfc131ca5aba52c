"""The chat completions API (`/v1/chat/completions`, `--model-args api=chat`): a rendered prompt goes as the
conversation it renders (the user's turn, then the assistant's turn so far, continued by the server with its chat
template), and the log-probabilities come in the chat format. The server's rendering is held to our ids by the
prompt-token counts and, where /tokenize takes messages (vLLM), by its tokenization."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from beliefdrift.backend.served.completions import Completions
from beliefdrift.backend.served.spec import ServedError
from beliefdrift.prompts.chat import chat_context

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def chat_turns(tokenizer: PreTrainedTokenizerBase) -> tuple[str, str]:
    """(what the model's chat template writes before a user turn's text, what it writes between that text and the
    assistant's): the frame `Chat.messages` reads a rendered context by. A tokenizer without a chat template is a
    ServedError."""
    marker = "\x00user\x00"
    rendered = chat_context(tokenizer, marker)
    if not getattr(tokenizer, "chat_template", None) or rendered.count(marker) != 1:
        raise ServedError("--model-args api=chat: the tokenizer has no chat template to read the prompts by; use the "
                          "completions API")
    before, _, between = rendered.partition(marker)
    return before, between


class Chat(Completions):
    """The chat dialect: prompts as text, sent as messages; the log-probabilities read from
    `logprobs.content[0].top_logprobs`."""

    api = "chat"
    path = "/chat/completions"
    token_ids = False
    tokenize_required = False
    misreading = "renders the conversation with another chat template than our tokenizer's"
    remedy = ", whose chat template the server must use"

    def __init__(self, model: str, tokenizer: PreTrainedTokenizerBase):
        super().__init__(model, tokenizer)
        self.turns = chat_turns(tokenizer)

    def messages(self, text: str) -> list[dict[str, str]]:
        """The conversation whose chat rendering is `text`: its user turn, then the assistant's turn so far."""
        before, between = self.turns
        user, found, assistant = text.removeprefix(before).partition(between)
        if not text.startswith(before) or not found:
            raise ServedError("--model-args api=chat: this prompt is not one user turn and the assistant's answer in "
                              "the model's chat template; use a chat --template, or the completions API")
        return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]

    def body(self, prompt: list[int] | str, logprobs: int, label_ids: Sequence[int], extensions: bool) -> dict:
        assert isinstance(prompt, str)
        body: dict[str, Any] = {"model": self.model, "messages": self.messages(prompt), "max_tokens": 1,
                                "temperature": 0.0, "logprobs": True, "top_logprobs": logprobs, "stream": False,
                                "add_generation_prompt": False, "continue_final_message": True}
        return self._extended(body, label_ids) if extensions else body

    @staticmethod
    def top_logprobs(choice: Any) -> dict[str, float] | None:
        """A choice's `logprobs.content[0].top_logprobs` ([{token, logprob}]) as {token: ℓ}; None where it has none."""
        logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
        if not isinstance(logprobs, dict):
            return None
        try:
            top = logprobs["content"][0]["top_logprobs"]
            return {str(entry["token"]): float(entry["logprob"]) for entry in top} or None
        except (KeyError, IndexError, TypeError, ValueError):
            return None

    @staticmethod
    def text(choice: Any) -> str | None:
        message = choice.get("message") if isinstance(choice, dict) else None
        return message.get("content") if isinstance(message, dict) else None

    def probe_text(self) -> str:
        """A short prompt in a conversation's assistant turn."""
        return chat_context(self.tokenizer, "Hi", "Hello")

    def tokenize_paths(self, root: str) -> tuple[str, ...]:
        """/tokenize taking messages (vLLM)."""
        return ("/tokenize",)

    def tokenize_body(self, path: str, text: str) -> dict[str, Any]:
        return {"model": self.model, "messages": self.messages(text), "add_generation_prompt": False,
                "continue_final_message": True, "add_special_tokens": False}
