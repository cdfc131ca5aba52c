"""Model loading, answer tokens and batched answer paths on a shared KV cache."""

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
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
