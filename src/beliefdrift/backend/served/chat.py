"""The chat completions API (`/v1/chat/completions`, `--model-args api=chat`): a rendered prompt goes as the
conversation it renders (the user's turn, then the assistant's turn so far, continued by the server with its chat
template), and the log-probabilities come in the chat format. The server's rendering is held to our ids by the
prompt-token counts and, where it can tokenize a conversation (vLLM's /tokenize, llama-server's /apply-template), by
its tokenization; where they differ, `misread` names the rendering the server used."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from beliefdrift.backend.served.completions import Completions
from beliefdrift.backend.served.spec import ServedError
from beliefdrift.prompts.chat import chat_context

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

#: The exact path where a chat endpoint cannot render our prompts.
EXACT_PATH = ("use the completions API, which takes our token ids (--model-args api=completions; vLLM, SGLang and "
              "llama-server)")


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
        """The conversation whose chat rendering is `text`: its user turn, then the assistant's turn so far (none
        where the assistant has written nothing yet: the server then opens its turn, `continued`)."""
        before, between = self.turns
        user, found, assistant = text.removeprefix(before).partition(between)
        if not text.startswith(before) or not found:
            raise ServedError("--model-args api=chat: this prompt is not one user turn and the assistant's answer in "
                              "the model's chat template; use a chat --template, or the completions API")
        turns = [{"role": "user", "content": user}]
        return turns + [{"role": "assistant", "content": assistant}] if assistant else turns

    @staticmethod
    def continued(messages: list[dict[str, str]]) -> dict[str, bool]:
        """How the server renders `messages`: the assistant's turn continued where it has begun, else opened (as the
        generation prompt: llama-server renders a continued empty turn without its header)."""
        begun = messages[-1]["role"] == "assistant"
        return {"add_generation_prompt": not begun, "continue_final_message": begun}

    def body(self, prompt: list[int] | list[list[int]] | str, logprobs: int, label_ids: Sequence[int],
             extensions: bool) -> dict:
        assert isinstance(prompt, str)
        messages = self.messages(prompt)
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": 1, "temperature": 0.0,
                                "logprobs": True, "top_logprobs": logprobs, "stream": False,
                                **self.continued(messages)}
        return self._extended(body, label_ids) if extensions else body

    @staticmethod
    def text(choice: Any) -> str | None:
        message = choice.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        return content if isinstance(content, str) else None

    def probe_text(self) -> str:
        """A short prompt in a conversation's assistant turn, ending as a PPR answer does (in a newline, which a
        chat template that trims message content loses)."""
        return chat_context(self.tokenizer, "Hi", "A\n")

    def misread(self, text: str, counted: int) -> str:
        """What the server's count of `counted` prompt tokens for the conversation `text` says it rendered: the
        assistant's message trimmed (transformers' continuation under a template that trims), or closed and a new
        turn opened (a server without `continue_final_message`), else another chat template."""
        messages = self.messages(text)
        if messages[-1]["role"] != "assistant":
            return super().misread(text, counted)
        renderings = {
            "continues the assistant's message as transformers does, and the model's chat template trims message "
            "content (Llama-3's `| trim`): the whitespace that ends each answer is lost":
                {"continue_final_message": True},
            "does not continue the assistant's message: it closes it and opens a new turn (llama-cpp-python's server "
            "has no continue_final_message)": {"add_generation_prompt": True},
        }
        for cause, flags in renderings.items():
            rendered = self.tokenizer.apply_chat_template(messages, tokenize=False, **flags)
            if len(self.tokenizer(rendered, add_special_tokens=False)["input_ids"]) == counted != len(
                    self.tokenizer(text, add_special_tokens=False)["input_ids"]):
                return f"the server {cause}; {EXACT_PATH}"
        return super().misread(text, counted)

    def tokenize_paths(self, root: str) -> tuple[str, ...]:
        """/tokenize taking messages (vLLM), /apply-template rendering them (llama-server, then its /tokenize)."""
        return root + "/tokenize", root + "/apply-template"

    def tokenize_body(self, path: str, text: str) -> dict[str, Any]:
        messages = self.messages(text)
        return {"model": self.model, "messages": messages, "add_special_tokens": False, **self.continued(messages)}
