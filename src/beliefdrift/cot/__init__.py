"""Chain-of-thought extension: sequences of thought–answer pairs, their embeddings and centroid drift."""

from beliefdrift import lazy_exports

#: Each module and the public names it defines (imported on first use).
_EXPORTS = {
    "beliefdrift.cot.answers": ("answer_view", "majority", "majority_accuracy"),
    "beliefdrift.cot.drift": ("CurveStats", "centroid_cosine_curve", "centroids", "cosine_matrix", "curve_stats"),
    "beliefdrift.config.reasoning": ("EMBEDDINGS", "ReasoningConfig"),
    "beliefdrift.cot.embeddings": ("SentenceEmbedder", "hidden_embeddings", "pair_embeddings"),
    "beliefdrift.cot.generation": (
        "DecodeConfig", "PromptCache", "Rollout", "generate_rollouts", "nucleus_sampler",
    ),
    "beliefdrift.cot.parser": ("Pair", "PairParser", "ParseResult", "parse_pairs", "render_pair"),
    "beliefdrift.cot.task": ("ReasoningTask",),
}
__all__ = [
    "EMBEDDINGS",
    "CurveStats",
    "DecodeConfig",
    "Pair",
    "PairParser",
    "ParseResult",
    "PromptCache",
    "ReasoningConfig",
    "ReasoningTask",
    "Rollout",
    "SentenceEmbedder",
    "answer_view",
    "centroid_cosine_curve",
    "centroids",
    "cosine_matrix",
    "curve_stats",
    "generate_rollouts",
    "hidden_embeddings",
    "majority",
    "majority_accuracy",
    "nucleus_sampler",
    "pair_embeddings",
    "parse_pairs",
    "render_pair",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

