"""Settings of the drift diagnostics as plain data (no torch): one EMD evaluation's (`EMDConfig`), what `drift` and
`emd` share (`DiagnosticsConfig`), and each command's (`DriftConfig`, `EMDCommandConfig`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from beliefdrift.config.options import (
    BYTES_PER_VALUE,
    MAX_COUNT,
    MAX_LABELS,
    RUN_OUTPUTS,
    BatchingOptions,
    DataOptions,
    ModelOptions,
    SamplingOptions,
    check_distinct_methods,
    memory_needed,
    option,
    out_option,
    retuned,
)
from beliefdrift.errors import UserError
from beliefdrift.registry import Method, parse_method

EXACT_BUDGET = 4096  # largest number of deepest-level nodes (per prefix) enumerated exactly
BATCH_BUDGET = 1024  # most paths advanced in one forward pass
MAX_BUDGET = 2**24  # the largest either may be
#: The distances d of EMD (`emd.DISTANCES`): L1, KL and total variation (½ L1).
DISTANCE_NAMES = ("l1", "kl", "tv")
BASE_METHODS = ("ppr", "ppr-seed5")
ADAPTER_METHODS = ("am-ppr", "am-ppr-seed5")


@dataclass(frozen=True)
class EMDConfig:
    """Settings of one EMD evaluation. 𝒩 = {0,2,4,6,8}, top-5 and k = 10 are the paper's (§5.1, Appendix E); the
    paper gives no K for EMD‾: K = 10 is our choice (the same horizon as EMD_k(b)'s k)."""

    horizon: int = 10  # K: EMD‾ averages k = 2 … K
    prefix_lengths: tuple[int, ...] = (0, 2, 4, 6, 8)  # 𝒩
    top_k: int = 5  # prefixes considered per length
    num_rollouts: int = 32  # J continuations per Monte Carlo estimate
    burn_in: int = 10  # EMD_k(b) for b = 0 … burn_in
    k: int = 10  # horizon of EMD_k(b)
    burn_in_paths: int = 1  # sampled burn-in prefixes per question (EMD_k(b) averages them)
    exact_budget: int = EXACT_BUDGET  # exact enumeration when |𝒜|^{K−1} ≤ this
    batch_budget: int = BATCH_BUDGET  # most paths per forward pass
    max_expansions: int = 256  # search budget for proving the top-K prefixes exact

    def __post_init__(self) -> None:
        if self.horizon < 2 or self.k < 2:
            raise ValueError(f"EMD needs horizons ≥ 2 (got K={self.horizon}, k={self.k})")
        if min(self.prefix_lengths, default=0) < 0 or self.burn_in < 0 or min(self.num_rollouts, self.top_k) < 1:
            raise ValueError(f"invalid EMD settings: {self}")


@dataclass(frozen=True)
class DiagnosticsConfig(ModelOptions, DataOptions, SamplingOptions, BatchingOptions):
    """Model, questions, methods and sampling of `drift` and `emd` (each adds its own settings)."""

    _argument_group_name = "methods"
    outputs: ClassVar[tuple[str, ...]] = (*RUN_OUTPUTS, "summary.md", "summary.json")

    methods: list[str] | None = option(None, f"PPR-type methods (default {' '.join(BASE_METHODS)}, plus "
                                             f"{' '.join(ADAPTER_METHODS)} with --adapter)")
    adapter: str | None = option(None, "peft LoRA directory of the SC-tuned model (AM-PPR)")
    skip_long_prompts: bool = option(False, "skip (and count) questions whose prompt and answers exceed the model's "
                                            "context")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_distinct_methods(self.methods or [])

    @property
    def method_list(self) -> list[Method]:
        names = self.methods or [*BASE_METHODS, *(ADAPTER_METHODS if self.adapter else ())]
        methods = [parse_method(name) for name in names]  # one name per method (`check_distinct_methods`)
        for method in methods:
            if not method.resamples:
                raise UserError(f"{method.name}: drift diagnostics need a resampling method (ppr…, am-ppr…)")
            if method.needs_adapter and self.adapter is None:
                raise UserError(f"{method.name} needs --adapter (a LoRA directory of the SC-tuned model)")
        return methods


@dataclass(frozen=True)
class DriftConfig(DiagnosticsConfig):
    """The settings of `beliefdrift drift`."""

    _argument_group_name = "drift"

    paths: int = retuned(SamplingOptions, "paths", 16)
    plot_questions: int = option(1, "per-question drift figures to draw", operational=True, minimum=0,
                                 maximum=MAX_COUNT)
    out: Path = out_option("beliefdrift-out/drift")


@dataclass(frozen=True)
class EMDCommandConfig(DiagnosticsConfig):
    """The settings of `beliefdrift emd`: -J is the number of Monte Carlo continuations per k-step estimate and of
    c.i.d. paths; -N the c.i.d. path length; --batch-questions batches the c.i.d. and floor paths of several
    questions (each question's k-step estimates fill up to --batch-budget paths per forward pass on their own)."""

    _argument_group_name = "EMD"

    paths: int = retuned(SamplingOptions, "paths", 32, "Monte Carlo continuations per k-step estimate and c.i.d. "
                                                       "paths (J)")
    horizon: int = option(10, "EMD‾ averages k = 2 … K", "-K", minimum=2, maximum=MAX_COUNT)
    prefix_lengths: list[int] = option([0, 2, 4, 6, 8], "prefix lengths 𝒩 of EMD‾", minimum=0, maximum=MAX_COUNT)
    top_k: int = option(5, "a prefix is drawn from the top-k prefixes of each length", minimum=1, maximum=MAX_COUNT)
    burn_in: int = option(10, "EMD_k(b) for b = 0 … this", minimum=0, maximum=MAX_COUNT)
    lookahead: int = option(10, "the horizon k of EMD_k(b)", "-k", minimum=2, maximum=MAX_COUNT)
    burn_in_paths: int = option(1, "sampled burn-in prefixes per question", minimum=1, maximum=MAX_COUNT)
    distance: list[str] = option(["l1", "kl"], "distances: l1, kl and tv (total variation = ½ L1)",
                                 choices=DISTANCE_NAMES)
    exact_budget: int = option(EXACT_BUDGET, "enumerate p^(k) exactly when |options|^(k-1) ≤ this, else Monte Carlo",
                                minimum=0, maximum=MAX_BUDGET)
    batch_budget: int = option(BATCH_BUDGET, "most paths per forward pass", operational=True, minimum=1,
                               maximum=MAX_BUDGET)
    noise_floor_replicates: int = option(100, "EMD of R matched Pólya-urn martingales per question: the floor printed "
                                              "beside every EMD figure, with its 95%% interval and whether EMD lies "
                                              "above it (0: off)", operational=True, minimum=0, maximum=MAX_COUNT,
                                    metavar="R")
    out: Path = out_option("beliefdrift-out/emd")

    def check_memory(self, questions: int | None = None) -> None:
        """The k-step estimates of one question: its prefixes (|𝒩| and burn-in paths × (burn-in + 1)) × J
        continuations × max(K, k) steps × labels float32s, and the noise floor's R replicates of each estimate."""
        prefixes = len(self.prefix_lengths) + self.burn_in_paths * (self.burn_in + 1)
        depth = max(self.horizon, self.lookahead) * MAX_LABELS
        needed = prefixes * depth * (self.paths * 4 + self.noise_floor_replicates * BYTES_PER_VALUE)
        memory_needed(f"the k-step estimates of a question ((|𝒩| {len(self.prefix_lengths)} + --burn-in-paths "
                      f"{self.burn_in_paths} × (--burn-in {self.burn_in} + 1)) × max(-K, -k) "
                      f"{max(self.horizon, self.lookahead)} × {MAX_LABELS} labels × (-J {self.paths} × 4 bytes + "
                      f"--noise-floor-replicates {self.noise_floor_replicates} × {BYTES_PER_VALUE} bytes))", needed,
                      "-J/--paths, -K/--horizon, -k/--lookahead, --burn-in, --burn-in-paths or "
                      "--noise-floor-replicates")
        super().check_memory(questions)

    @property
    def emd(self) -> EMDConfig:
        return EMDConfig(horizon=self.horizon, prefix_lengths=tuple(self.prefix_lengths), top_k=self.top_k,
                         num_rollouts=self.paths, burn_in=self.burn_in, k=self.lookahead,
                         burn_in_paths=self.burn_in_paths, exact_budget=self.exact_budget,
                         batch_budget=self.batch_budget)
