"""Prompt templates and their rendering with chat templates."""

from typing import TYPE_CHECKING

from beliefdrift.exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (`beliefdrift.exports`)
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
    __getattr__, __dir__, __all__ = lazy_exports(__name__)
