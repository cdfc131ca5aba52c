"""Prompt templates and their rendering with chat templates."""

from beliefdrift import lazy_exports

#: Each module and the public names it defines (imported on first use).
_EXPORTS = {
    "beliefdrift.prompts.render": (
        "DEFAULT_PPR_TEMPLATE", "DEFAULT_TEMPLATE_ENDING", "DIRECT_PREFILL", "DIRECT_TEMPLATE", "PPR_TEMPLATES",
        "TEMPLATE_ENDINGS", "chat_context", "fill", "format_question", "load_template", "question_prompt",
        "with_ending",
    ),
}
__all__ = [
    "DEFAULT_PPR_TEMPLATE",
    "DEFAULT_TEMPLATE_ENDING",
    "DIRECT_PREFILL",
    "DIRECT_TEMPLATE",
    "PPR_TEMPLATES",
    "TEMPLATE_ENDINGS",
    "chat_context",
    "fill",
    "format_question",
    "load_template",
    "question_prompt",
    "with_ending",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
