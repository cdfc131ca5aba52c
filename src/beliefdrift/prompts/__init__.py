"""Prompt templates and their rendering with chat templates."""

from beliefdrift.prompts.render import (
    DEFAULT_PPR_TEMPLATE,
    DIRECT_PREFILL,
    DIRECT_TEMPLATE,
    PPR_TEMPLATES,
    chat_context,
    fill,
    format_question,
    load_template,
    question_prompt,
)

__all__ = [
    "DEFAULT_PPR_TEMPLATE",
    "DIRECT_PREFILL",
    "DIRECT_TEMPLATE",
    "PPR_TEMPLATES",
    "chat_context",
    "fill",
    "format_question",
    "load_template",
    "question_prompt",
]
