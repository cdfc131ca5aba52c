"""Chain-of-thought extension: sequences of thought–answer pairs, their embeddings and centroid drift."""

from typing import TYPE_CHECKING

from beliefdrift import lazy_exports

#: Each module and the public names it defines (imported on first use).
_EXPORTS = {
    "beliefdrift.cot.answers": ("answer_view", "majority", "majority_accuracy"),
    "beliefdrift.cot.drift": ("CurveStats", "centroid_cosine_curve", "centroids", "cosine_matrix", "curve_stats"),
    "beliefdrift.config.reasoning": ("EMBEDDINGS", "ReasoningConfig"),
    "beliefdrift.cot.embeddings": ("SentenceEmbedder", "hidden_embeddings", "pair_embeddings"),
    "beliefdrift.backend.sampling": ("nucleus_sampler",),
    "beliefdrift.cot.generation": ("DecodeConfig", "PromptCache", "Rollout", "generate_rollouts"),
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
if TYPE_CHECKING:  # the names `lazy_exports` imports on first use, for editors and type checkers
    from beliefdrift.backend.sampling import nucleus_sampler as nucleus_sampler
    from beliefdrift.config.reasoning import EMBEDDINGS as EMBEDDINGS
    from beliefdrift.config.reasoning import ReasoningConfig as ReasoningConfig
    from beliefdrift.cot.answers import answer_view as answer_view
    from beliefdrift.cot.answers import majority as majority
    from beliefdrift.cot.answers import majority_accuracy as majority_accuracy
    from beliefdrift.cot.drift import CurveStats as CurveStats
    from beliefdrift.cot.drift import centroid_cosine_curve as centroid_cosine_curve
    from beliefdrift.cot.drift import centroids as centroids
    from beliefdrift.cot.drift import cosine_matrix as cosine_matrix
    from beliefdrift.cot.drift import curve_stats as curve_stats
    from beliefdrift.cot.embeddings import SentenceEmbedder as SentenceEmbedder
    from beliefdrift.cot.embeddings import hidden_embeddings as hidden_embeddings
    from beliefdrift.cot.embeddings import pair_embeddings as pair_embeddings
    from beliefdrift.cot.generation import DecodeConfig as DecodeConfig
    from beliefdrift.cot.generation import PromptCache as PromptCache
    from beliefdrift.cot.generation import Rollout as Rollout
    from beliefdrift.cot.generation import generate_rollouts as generate_rollouts
    from beliefdrift.cot.parser import Pair as Pair
    from beliefdrift.cot.parser import PairParser as PairParser
    from beliefdrift.cot.parser import ParseResult as ParseResult
    from beliefdrift.cot.parser import parse_pairs as parse_pairs
    from beliefdrift.cot.parser import render_pair as render_pair
    from beliefdrift.cot.task import ReasoningTask as ReasoningTask
else:  # (a module `__getattr__` seen by a type checker would let any name pass)
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

