"""Chain-of-thought extension: sequences of thought–answer pairs, their embeddings and centroid drift."""

from beliefdrift.reasoning.answers import answer_view, majority, majority_accuracy
from beliefdrift.reasoning.drift import CurveStats, centroid_cosine_curve, centroids, cosine_matrix, curve_stats
from beliefdrift.reasoning.embeddings import EMBEDDINGS, SentenceEmbedder, hidden_embeddings, pair_embeddings
from beliefdrift.reasoning.experiment import (
    DEMO_CONFIG,
    ReasoningConfig,
    demo_section,
    run_experiment,
    run_question,
    summary_markdown,
)
from beliefdrift.reasoning.generation import DecodeConfig, PromptCache, Rollout, generate_rollouts, nucleus_sampler
from beliefdrift.reasoning.parser import Pair, PairParser, ParseResult, parse_pairs, render_pair
from beliefdrift.reasoning.task import ReasoningTask

__all__ = [
    "DEMO_CONFIG",
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
    "demo_section",
    "generate_rollouts",
    "hidden_embeddings",
    "majority",
    "majority_accuracy",
    "nucleus_sampler",
    "pair_embeddings",
    "parse_pairs",
    "render_pair",
    "run_experiment",
    "run_question",
    "summary_markdown",
]
