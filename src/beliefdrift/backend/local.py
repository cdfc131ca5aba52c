"""A causal LM run in this process by transformers, as a `LanguageModel` (`TransformersModel`): its answer paths
and rollouts on the path caches (`backend.paths`), its passes run as its `EngineSettings` say."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from beliefdrift.backend import compat
from beliefdrift.backend.answer_tokens import AnswerTokens
from beliefdrift.backend.model import CAPTURED, EngineSettings, GenerationSettings, LanguageModel
from beliefdrift.backend.path_cache import prefill, shares_prefix
from beliefdrift.backend.paths import CacheRollouts, PathBatch
from beliefdrift.backend.wrappers import input_device, transformers_model
from beliefdrift.errors import UserError


@dataclass
class TransformersModel(LanguageModel):
    """A loaded causal LM (`model`, a transformers module, perhaps inside DDP/FSDP or peft wrappers) with its
    tokenizer, ready for the resampling engine; `engine` is how it runs the engine's passes."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    engine: EngineSettings = field(default_factory=EngineSettings)
    _compiled: Callable[..., Any] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def device(self) -> torch.device:
        """Where inputs go: the input embedding's device (the first of several under a device map)."""
        return input_device(self.model)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def default_batch_questions(self) -> int:
        """16 on a GPU (many paths per forward pass keep it busy), 1 on the CPU (where one question's paths already
        fill the cores)."""
        return 16 if self.device.type == "cuda" else 1

    @property
    def context_length(self) -> int | None:
        return getattr(self.model.config, "max_position_embeddings", None)

    @property
    def generation_config(self) -> GenerationSettings | None:
        return self.model.generation_config

    @property
    def forward(self) -> Callable[..., Any]:
        """What runs the engine's forward passes: the module, or with `engine.compile` its forward through
        `torch.compile` (inductor, dynamic shapes), compiled once the engine has chosen its cache (that choice's probe
        passes run eagerly). One set of graphs serves every prompt length, path count and step; a batch of another
        number of questions compiles its own. Within these calls only, a graph that fails to compile (at the first
        pass, or hours into a run when a new structure appears) runs eagerly, with torch's warning, instead of ending
        the run (`compat.compiler_errors_suppressed`)."""
        if not self.engine.compile:
            return self.model
        if self._compiled is None:
            shares_prefix(self.model)
            self._compiled = _errors_suppressed(torch.compile(self.model.forward, dynamic=True))
        return self._compiled

    def prefill(self, tokens: AnswerTokens) -> PathBatch:
        return PathBatch.prefill(self.model, tokens, self.forward, self.engine.answer_step)

    def rollouts(self, prompt_ids: Sequence[int]) -> CacheRollouts:
        cache, _ = prefill(self.model, prompt_ids, self.forward, logits_to_keep=1)
        return CacheRollouts(cache, self.engine.decode_step)

    def prepared(self, compile: bool = False, cuda_graphs: bool | None = None) -> TransformersModel:
        """This model with `engine.compile` set by `compile` and its answer steps and chain-of-thought decoding steps
        static and replayed as CUDA graphs when `cuda_graphs` is (no compiler; None: where the model is on one CUDA
        device, measured faster there for the answer step, docs/gpu.md): a new `TransformersModel` on the same module
        where that changes its engine, else this one."""
        if cuda_graphs and self.device.type != "cuda":
            raise UserError(f"--cuda-graphs: the model is on {self.device}; CUDA graphs need --device cuda")
        if cuda_graphs is None:
            devices = set((getattr(transformers_model(self.model), "hf_device_map", None) or {}).values())
            cuda_graphs = self.device.type == "cuda" and len(devices) <= 1
        engine = self.engine
        if cuda_graphs:
            engine = dataclasses.replace(engine, answer_step=CAPTURED, decode_step=CAPTURED)
        if compile:
            engine = dataclasses.replace(engine, compile=True)
        return self if engine == self.engine else dataclasses.replace(self, engine=engine)


def _errors_suppressed(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """`compiled`, called within `compat.compiler_errors_suppressed`."""

    @functools.wraps(compiled)
    def call(*args: Any, **kwargs: Any) -> Any:
        with compat.compiler_errors_suppressed():
            return compiled(*args, **kwargs)

    return call
