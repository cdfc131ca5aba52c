"""Prompt templates and their rendering with chat templates."""

from typing import TYPE_CHECKING

from beliefdrift import lazy_exports

#: Each module and the public names it defines (imported on first use).
_EXPORTS = {
    "beliefdrift.prompts.chat": ("chat_context",),
    "beliefdrift.prompts.render": (
        "DEFAULT_PPR_TEMPLATE", "DEFAULT_TEMPLATE_ENDING", "DIRECT_PREFILL", "DIRECT_TEMPLATE", "PPR_TEMPLATES",
        "TEMPLATE_ENDINGS", "fill", "format_question", "load_template", "question_prompt",
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
if TYPE_CHECKING:  # the names `lazy_exports` imports on first use, for editors and type checkers
    from beliefdrift.prompts.chat import chat_context as chat_context
    from beliefdrift.prompts.render import DEFAULT_PPR_TEMPLATE as DEFAULT_PPR_TEMPLATE
    from beliefdrift.prompts.render import DEFAULT_TEMPLATE_ENDING as DEFAULT_TEMPLATE_ENDING
    from beliefdrift.prompts.render import DIRECT_PREFILL as DIRECT_PREFILL
    from beliefdrift.prompts.render import DIRECT_TEMPLATE as DIRECT_TEMPLATE
    from beliefdrift.prompts.render import PPR_TEMPLATES as PPR_TEMPLATES
    from beliefdrift.prompts.render import TEMPLATE_ENDINGS as TEMPLATE_ENDINGS
    from beliefdrift.prompts.render import fill as fill
    from beliefdrift.prompts.render import format_question as format_question
    from beliefdrift.prompts.render import load_template as load_template
    from beliefdrift.prompts.render import question_prompt as question_prompt
    from beliefdrift.prompts.render import with_ending as with_ending
else:  # (a module `__getattr__` seen by a type checker would let any name pass)
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
