"""The one interface between the engine and a model, whichever computes it (lm-evaluation-harness's abstract `LM`
plays this part there): a `LanguageModel` prefills prompts into `AnswerPaths` and chain-of-thought prompts into
`Rollouts`, and says its device, dtype, context and batching hint. `TransformersModel` (`backend.local`) and
`ServedModel` (`backend.served.model`) implement it; nothing above `backend/` asks which one it holds.

θ over the answer labels is an `AnswerDist`, from a model's logits or a server's log-probabilities alike. How a
local model runs the engine's passes (`--compile`, static and CUDA-graph-captured steps) is data it holds and hands
to every batch it makes (`EngineSettings`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    from typing_extensions import Self

    from beliefdrift.backend.answer_tokens import AnswerTokens


@dataclass(frozen=True)
class AnswerDist:
    """θ over the answer labels and how much full-vocabulary mass the labels hold.

    probs = softmax(logits[label_ids]);  valid_mass = Σ_labels softmax(logits)[label].
    """

    probs: torch.Tensor  # [..., K]
    valid_mass: torch.Tensor  # [...]

    @classmethod
    def from_logits(cls, logits: torch.Tensor, label_ids: torch.Tensor) -> AnswerDist:
        """From the model's next-token logits [..., V] and the labels' token ids [K]."""
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        return cls.from_logprobs(log_probs[..., label_ids])

    @classmethod
    def from_logprobs(cls, label_logprobs: torch.Tensor) -> AnswerDist:
        """From the labels' log-probabilities [..., K] under the full-vocabulary softmax (ℓ[labels]):
        θ = softmax(ℓ[labels]), valid_mass = Σ exp(ℓ[labels])."""
        return cls(torch.softmax(label_logprobs, dim=-1), label_logprobs.exp().sum(-1))

    def cpu(self) -> AnswerDist:
        """The same distribution on the CPU, where sampling and estimators run."""
        return AnswerDist(self.probs.cpu(), self.valid_mass.cpu())

    def select(self, index: torch.Tensor | list[int]) -> AnswerDist:
        """The distributions of the paths `index` names, in that order."""
        return AnswerDist(self.probs[index], self.valid_mass[index])

    @staticmethod
    def concat(dists: Sequence[AnswerDist]) -> AnswerDist:
        """The distributions of every path of `dists`, one after another."""
        return AnswerDist(torch.cat([d.probs for d in dists]), torch.cat([d.valid_mass for d in dists]))


# ------------------------------------------------------------------------------ engine modes


@dataclass(frozen=True)
class StepMode:
    """How a step the engine repeats (an answer step, a chain-of-thought decoding step) runs: eagerly on growing
    caches, or `static` (every tensor it touches allocated once, the step a CUDA graph captures) and, with `capture`,
    recorded as a CUDA graph once per batch on a CUDA device and replayed for the others. The numbers equal the eager
    steps' with the same draws up to rounding (the static cache's empty slots are attended with weight zero)."""

    static: bool = False
    capture: bool = False

    def __post_init__(self) -> None:
        if self.capture and not self.static:
            raise ValueError("a captured step is a static one: StepMode(static=True, capture=True)")


EAGER = StepMode()
CAPTURED = StepMode(static=True, capture=True)


@dataclass(frozen=True)
class EngineSettings:
    """How a local model runs the engine's forward passes: `compile` (`--compile`: through `torch.compile`, one set of
    graphs for every prompt length, path count and step) and each repeated step's `StepMode` (`--cuda-graphs`: the
    answer step and the chain-of-thought decoding step static and captured). Plain data: the model holds it and hands
    it to every batch and set of rollouts it makes."""

    compile: bool = False
    answer_step: StepMode = field(default=EAGER)
    decode_step: StepMode = field(default=EAGER)


# ------------------------------------------------------------------------------ what a model gives


class SteppedPaths(Protocol):
    """B answer paths as `engine.resampling.sample_answers` advances them: `dist` holds every path's current θ on the
    model's device. A process with a known θ (a test's, a bench's: `EagerPaths`) implements it without a model."""

    #: Every path's current θ.
    dist: AnswerDist
    #: How `engine.resampling.sample_answers` runs these paths' answer steps.
    answer_step: StepMode

    @property
    def size(self) -> int: ...

    def reserve(self, answers: int) -> None:
        """Room for `answers` more answers per path (a hint: advancing further still works)."""

    def advance(self, answers: torch.Tensor) -> AnswerDist:
        """Append answers [B, m] (label indices) to every path; the new θ."""

    def static_steps(self, answers: int) -> Callable[[torch.Tensor], AnswerDist] | None:
        """`answers` answer steps with every tensor they touch allocated now, as a function that advances every path
        by answers [B, 1] and returns the new θ; None where these paths cannot run them."""


class AnswerPaths(SteppedPaths, Protocol):
    """B answer paths after a prompt (or after several prompts with the same answer tokens, one per question), as the
    engine forks, joins and advances them; `tokens` are the first prompt's (their answer tokens are shared).
    `backend.paths.PathBatch` (a local model's KV cache) and `backend.served.paths.ServedBatch` (contexts on a
    server) implement it."""

    tokens: AnswerTokens

    def select(self, index: torch.Tensor | list[int]) -> Self:
        """A new batch whose path i continues path `index[i]` of this one (fork with repeats, or subset)."""

    def concat(self, batches: Sequence[Self]) -> Self:
        """One batch holding every path of `batches` (of one prompt or of several with the same answer tokens)."""

    def fork(self, copies: int) -> Self:
        """`copies` paths per existing path (path i becomes paths i·copies … i·copies + copies − 1)."""


class EagerPaths:
    """Answer paths whose steps always run one by one (no static step): a served model's, a process without a
    model."""

    answer_step = EAGER

    def static_steps(self, answers: int) -> None:
        """None: these paths run no static steps."""


class Rollouts(Protocol):
    """Chain-of-thought rollouts after a prompt, decoded one token per step by `cot.generation`: `size` rollouts,
    each the prompt and its own tokens. `backend.paths.CacheRollouts` (a local model's KV cache) and
    `backend.served.paths.ServedRollouts` (contexts on a server) implement it."""

    @property
    def size(self) -> int: ...

    def select(self, index: torch.Tensor) -> Self:
        """A new set whose rollout i continues rollout `index[i]` of this one."""

    def reserve(self, tokens: int) -> None:
        """Room for `tokens` more tokens per rollout (a hint)."""

    def extend(self, input_ids: torch.Tensor, padding: torch.Tensor | None = None, *,
               nucleus: tuple[float, float, Sequence[int]], hidden: bool = False,
               active: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Append input_ids [B, T] to every rollout (the first `padding[b]` of row b are padding, never attended
        to); (the next-token logits [B, vocab] of the rollouts in `active`, all by default, for the sampler of
        `nucleus` (temperature, top_p, banned ids: what a model that gives only its top log-probabilities needs to
        make logits the sampler draws from as from its full ones); the last hidden state [B, H] of the last token
        when `hidden`, else None). The rows not in `active` may hold anything."""


@runtime_checkable
class StaticRollouts(Rollouts, Protocol):
    """Rollouts whose decoding steps can run as static steps, the step a CUDA graph captures (`backend.paths.
    CacheRollouts`, a local model's): `decode_step` says whether they do (`EngineSettings.decode_step`)."""

    #: How `cot.generation` runs these rollouts' decoding steps.
    decode_step: StepMode

    @property
    def hidden_size(self) -> int:
        """The size of the last hidden state a pass gives."""

    def static_steps(self, tokens: int, hidden: bool) -> Callable[[torch.Tensor], tuple[torch.Tensor,
                                                                                        torch.Tensor | None]] | None:
        """`tokens` passes of one token per rollout with every tensor they touch allocated now (the rollouts are
        theirs from then on), as a function that feeds token ids [B] and returns (the next-token logits [B, vocab],
        the last hidden state [B, H] when `hidden`, else None); None where these rollouts cannot run them."""


class GenerationSettings(Protocol):
    """What the engine reads of a model's generation config (transformers' `GenerationConfig`)."""

    @property
    def eos_token_id(self) -> int | list[int] | None:
        """The id or ids that end a generated sequence beside the tokenizer's (None: only the tokenizer's)."""


class LanguageModel(ABC):
    """A model the engine runs, whichever computes it: its `name` (what `--model` took), its `tokenizer` (what the
    prompts and answers are written with), where θ arrives (`device`, `dtype`), how long a context it takes, and the
    answer paths and rollouts it makes of prompts. `bd.load_model` returns one."""

    name: str
    tokenizer: PreTrainedTokenizerBase

    @property
    @abstractmethod
    def device(self) -> torch.device:
        """Where the paths' θ lives, and so where answers are drawn."""

    @property
    @abstractmethod
    def dtype(self) -> torch.dtype:
        """The dtype of the model's computations (θ is float32 or wider)."""

    @property
    @abstractmethod
    def default_batch_questions(self) -> int:
        """How many questions share a batch when --batch-questions is 0 (the batching hint)."""

    @property
    @abstractmethod
    def context_length(self) -> int | None:
        """The most positions a context may hold (None: not known; the model refuses a longer one itself)."""

    @property
    @abstractmethod
    def generation_config(self) -> GenerationSettings | None:
        """The model's generation config (None: it has none, and only the tokenizer's end-of-sequence id ends a
        generated sequence)."""

    @property
    def hidden_states(self) -> bool:
        """Whether its rollouts give the hidden states of their tokens (`Rollouts.extend(hidden=True)`)."""
        return True

    @abstractmethod
    def prefill(self, tokens: AnswerTokens) -> AnswerPaths:
        """One answer path holding the prompt of `tokens`, its θ the distribution of the first answer."""

    @abstractmethod
    def rollouts(self, prompt_ids: Sequence[int]) -> Rollouts:
        """One rollout holding the prompt `prompt_ids`; its first `extend` gives the next-token logits."""

    @abstractmethod
    def prepared(self, compile: bool = False, cuda_graphs: bool | None = None) -> LanguageModel:
        """This model set up for `--compile` and `--cuda-graphs` (None: where the model decides); a model without a
        local forward pass refuses either."""


def questions_per_batch(batch_questions: int, lm: LanguageModel) -> int:
    """`batch_questions`, or when 0 the model's own default (`LanguageModel.default_batch_questions`)."""
    return batch_questions or lm.default_batch_questions
