"""Model loading, answer tokens and batched answer paths on a shared KV cache."""

from beliefdrift.backend.answer_tokens import (
    AnswerTokenError,
    AnswerTokens,
    resolve_answer_tokens,
    resolve_single_answer,
)
from beliefdrift.backend.loading import DEFAULT_MODEL, REGISTRY, LanguageModel, load_model
from beliefdrift.backend.paths import AnswerDist, PathBatch

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
