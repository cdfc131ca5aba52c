"""Chain-of-thought extension: sequences of thought–answer pairs, their embeddings and centroid drift."""

from typing import TYPE_CHECKING

from beliefdrift.exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (`beliefdrift.exports`)
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
    __getattr__, __dir__, __all__ = lazy_exports(__name__)
