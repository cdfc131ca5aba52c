"""Model loading, answer tokens and batched answer paths on a shared KV cache."""

from typing import TYPE_CHECKING

from beliefdrift import lazy_exports

#: Each module and the public names it defines (imported on first use).
_EXPORTS = {
    "beliefdrift.backend.answer_tokens": (
        "AnswerTokenError", "AnswerTokens", "resolve_answer_tokens", "resolve_single_answer",
    ),
    "beliefdrift.backend.loading": ("DEFAULT_MODEL", "REGISTRY", "LanguageModel", "load_model"),
    "beliefdrift.backend.paths": ("AnswerDist", "PathBatch"),
}
__all__ = [
    "DEFAULT_MODEL",
    "REGISTRY",
    "AnswerDist",
    "AnswerTokenError",
    "AnswerTokens",
    "LanguageModel",
    "PathBatch",
    "load_model",
    "resolve_answer_tokens",
    "resolve_single_answer",
]
if TYPE_CHECKING:  # the names `lazy_exports` imports on first use, for editors and type checkers
    from beliefdrift.backend.answer_tokens import AnswerTokenError as AnswerTokenError
    from beliefdrift.backend.answer_tokens import AnswerTokens as AnswerTokens
    from beliefdrift.backend.answer_tokens import resolve_answer_tokens as resolve_answer_tokens
    from beliefdrift.backend.answer_tokens import resolve_single_answer as resolve_single_answer
    from beliefdrift.backend.loading import DEFAULT_MODEL as DEFAULT_MODEL
    from beliefdrift.backend.loading import REGISTRY as REGISTRY
    from beliefdrift.backend.loading import LanguageModel as LanguageModel
    from beliefdrift.backend.loading import load_model as load_model
    from beliefdrift.backend.paths import AnswerDist as AnswerDist
    from beliefdrift.backend.paths import PathBatch as PathBatch
else:  # (a module `__getattr__` seen by a type checker would let any name pass)
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
