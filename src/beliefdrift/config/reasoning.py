"""Settings of the chain-of-thought experiment as plain data (no torch): one experiment's (`ReasoningConfig`) and
the `reasoning` command's (`ReasoningCommandConfig`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from beliefdrift.config.options import (
    MAX_COUNT,
    RUN_OUTPUTS,
    BatchingOptions,
    DataOptions,
    ModelOptions,
    SamplingOptions,
    option,
    out_option,
    retuned,
)
from beliefdrift.errors import UserError
from beliefdrift.prompts.render import DEFAULT_TEMPLATE_ENDING

#: The longest token budget: the longest contexts models have (the model's own context is checked when it loads).
MAX_TOKENS = 2**20
#: How a thought–answer pair is embedded: the model's mean last hidden state, or all-MiniLM-L6-v2 (extra).
EMBEDDINGS = ("hidden", "sentence")


@dataclass(frozen=True)
class ReasoningConfig:
    """R rollouts of up to N pairs; m reasoning seeds (0: no seeded condition); lag τ; sampling; guided
    decoding (tags written for the model, see `DecodeConfig`) or free (the paper's prompt-only setting)."""

    rollouts: int = 8
    pairs: int = 10
    seeds: int = 5
    tau: int = 5
    max_new_tokens: int = 1536
    seed_max_new_tokens: int = 384
    temperature: float = 1.0
    top_p: float = 0.95
    seed: int = 0
    embedding: str = "hidden"
    guided: bool = True
    max_solution_tokens: int = 192

    def __post_init__(self) -> None:
        if self.rollouts < 1 or self.pairs < 1 or self.seeds < 0 or self.tau < 1:
            raise ValueError(f"need R >= 1, N >= 1, m >= 0 and tau >= 1, got {self}")
        if self.embedding not in EMBEDDINGS:
            raise ValueError(f"unknown embedding {self.embedding!r}; expected one of {EMBEDDINGS}")

    @property
    def conditions(self) -> list[tuple[str, str, int]]:
        """(key, title, m) of each condition: PPR, and PPR + SEED_m when m > 0."""
        plain = [("ppr", "PPR", 0)]
        return plain + ([(f"ppr-seed{self.seeds}", f"PPR + SEED_{self.seeds}", self.seeds)] if self.seeds else [])


DEFAULTS = ReasoningConfig()


@dataclass(frozen=True)
class ReasoningCommandConfig(ModelOptions, DataOptions, SamplingOptions):
    """The settings of `beliefdrift reasoning`: rollouts are its paths, thought–answer pairs its steps."""

    _argument_group_name = "rollouts"
    outputs: ClassVar[tuple[str, ...]] = (*RUN_OUTPUTS, "summary.json")

    # Not the PPR prompt the other commands fill (never None there) but the pairs prompt, None: the dataset's own;
    # the same flag, so the same field, with a type the option group's does not allow.
    template: str | None = retuned(ModelOptions, "template", None,  # type: ignore[assignment]
                                   "pairs prompt: a .txt file with {num_lines} and {question} (default: the "
                                   "dataset's)")
    template_ending: str = retuned(ModelOptions, "template_ending", DEFAULT_TEMPLATE_ENDING,
                                   "fence only: the pairs prompt has no question fence to end (paper applies to the "
                                   "multiple-choice commands)")
    dataset: str = retuned(DataOptions, "dataset", "gsm8k")
    n: int | None = retuned(DataOptions, "n", 20)
    paths: int = retuned(SamplingOptions, "paths", DEFAULTS.rollouts, "rollouts per question (J; R in Appendix F)")
    steps: int = retuned(SamplingOptions, "steps", DEFAULTS.pairs, "thought–answer pairs per rollout (N)")
    seed_pairs: int = option(DEFAULTS.seeds, "reasoning seeds (prefilled pairs) per rollout for the seeded "
                                             "condition (m; 0: unseeded only)", "-m", minimum=0,
                            maximum=MAX_COUNT)
    tau: int = option(DEFAULTS.tau, "lag τ of cos(h̄_n, h̄_{n+τ})", minimum=1, maximum=MAX_COUNT)
    max_new_tokens: int = option(DEFAULTS.max_new_tokens, "token budget per rollout", minimum=1, maximum=MAX_TOKENS)
    seed_max_new_tokens: int = option(DEFAULTS.seed_max_new_tokens, "token budget per reasoning seed", minimum=1,
                                      maximum=MAX_TOKENS)
    max_solution_tokens: int = option(DEFAULTS.max_solution_tokens, "guided format: close a solution after this "
                                                                    "many tokens", minimum=1,
                                      maximum=MAX_TOKENS)
    temperature: float = option(DEFAULTS.temperature, "sampling temperature (0: greedy)", minimum=0, maximum=100)
    top_p: float = option(DEFAULTS.top_p, "nucleus sampling mass", above=0, maximum=1)
    format: str = option("guided" if DEFAULTS.guided else "free", "guided: the pair tags are written for the model; "
                         "free: prompt only (the paper's)", choices=("guided", "free"))
    embedding: str = option(DEFAULTS.embedding, "hidden: mean last hidden state of the model; sentence: "
                                                "all-MiniLM-L6-v2 (extra)", choices=EMBEDDINGS)
    cuda_graphs: bool | None = retuned(BatchingOptions, "cuda_graphs", None,
                                       "run the decoding steps as static steps and replay one recorded step of each "
                                       "batch of rollouts as a CUDA graph (no compiler; the host still reads the "
                                       "tokens, every step in the guided format): on a GPU a step is bound by "
                                       "launching kernels. Default: on where the model is on one CUDA device "
                                       "(--no-cuda-graphs: off)")
    out: Path = out_option("beliefdrift-out/reasoning")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.template_ending != DEFAULT_TEMPLATE_ENDING:
            raise UserError("--template-ending: the pairs prompt has no question fence to end; the option applies to "
                            "the multiple-choice commands only")

    @property
    def experiment(self) -> ReasoningConfig:
        return ReasoningConfig(rollouts=self.paths, pairs=self.steps, seeds=self.seed_pairs, tau=self.tau,
                               max_new_tokens=self.max_new_tokens, seed_max_new_tokens=self.seed_max_new_tokens,
                               temperature=self.temperature, top_p=self.top_p, seed=self.seed,
                               embedding=self.embedding, guided=self.format == "guided",
                               max_solution_tokens=self.max_solution_tokens)
