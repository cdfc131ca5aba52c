"""Models as the engine sees them (`LanguageModel`: a transformers model in this process, `TransformersModel`, or
one behind an inference server, `backend.served`), their loading, answer tokens, and the answer paths they make."""

from typing import TYPE_CHECKING

from beliefdrift.exports import lazy_exports

if TYPE_CHECKING:  # the public names, imported on first use (`beliefdrift.exports`)
    from beliefdrift.backend.answer_tokens import AnswerTokenError as AnswerTokenError
    from beliefdrift.backend.answer_tokens import AnswerTokens as AnswerTokens
    from beliefdrift.backend.answer_tokens import resolve_answer_tokens as resolve_answer_tokens
    from beliefdrift.backend.answer_tokens import resolve_single_answer as resolve_single_answer
    from beliefdrift.backend.loading import load_model as load_model
    from beliefdrift.backend.local import TransformersModel as TransformersModel
    from beliefdrift.backend.model import AnswerDist as AnswerDist
    from beliefdrift.backend.model import AnswerPaths as AnswerPaths
    from beliefdrift.backend.model import EngineSettings as EngineSettings
    from beliefdrift.backend.model import LanguageModel as LanguageModel
    from beliefdrift.backend.model import Rollouts as Rollouts
    from beliefdrift.backend.model import StepMode as StepMode
    from beliefdrift.backend.paths import PathBatch as PathBatch
    from beliefdrift.registry import DEFAULT_MODEL as DEFAULT_MODEL
    from beliefdrift.registry import REGISTRY as REGISTRY
else:  # (a module `__getattr__` seen by a type checker would let any name pass)
    __getattr__, __dir__, __all__ = lazy_exports(__name__)
