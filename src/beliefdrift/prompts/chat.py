"""A user turn and the opened assistant turn in the model's chat template (plain text for a model without one)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def chat_context(tokenizer: PreTrainedTokenizerBase, user_text: str, prefill: str = "") -> str:
    """`user_text` as a user turn, then the opened assistant turn with `prefill` already written."""
    if getattr(tokenizer, "chat_template", None):
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": user_text}], tokenize=False, add_generation_prompt=True
        )
        return rendered + prefill
    return f"{user_text}\n\n{prefill}"
