"""`beliefdrift reasoning`: drift of chain-of-thought trajectories in embedding space (paper Appendix F).

For each question, J rollouts write up to N thought–answer pairs <sol>…</sol><ans>…</ans>, with and
without m reasoning seeds (pairs drawn from a direct chain-of-thought prompt, prefilled first). Reports
cos(h̄_n, h̄_{n+τ}) of the pair-embedding centroids, mean ± std over questions, and the majority answer.
Each question × condition is stored in OUT/run.sqlite (finished questions are skipped on a re-run; under torchrun
the questions are sharded over the processes, write `-n` there); also OUT/records.csv, OUT/summary.json and
OUT/centroid_drift.{png,pdf}. --template replaces the pairs prompt (a .txt file with {num_lines} and {question};
default per dataset: reasoning-gsm8k, reasoning-gpqa, reasoning-mcqa).
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path

from beliefdrift.config.options import (
    DataOptions,
    ModelOptions,
    SamplingOptions,
    add_command,
    option,
    out_option,
    retuned,
    settings_from,
)
from beliefdrift.config.reasoning import EMBEDDINGS, ReasoningConfig
from beliefdrift.errors import UserError
from beliefdrift.prompts.render import DEFAULT_TEMPLATE_ENDING

log = logging.getLogger(__name__)
DEFAULTS = ReasoningConfig()


@dataclass(frozen=True)
class ReasoningCommandConfig(ModelOptions, DataOptions, SamplingOptions):
    """The settings of `beliefdrift reasoning`: rollouts are its paths, thought–answer pairs its steps."""

    _argument_group_name = "rollouts"

    template: str | None = retuned(ModelOptions, "template", None, "pairs prompt: a .txt file with {num_lines} and "
                                                                   "{question} (default: the dataset's)")
    dataset: str = retuned(DataOptions, "dataset", "gsm8k")
    n: int | None = retuned(DataOptions, "n", 20)
    paths: int = retuned(SamplingOptions, "paths", DEFAULTS.rollouts, "rollouts per question (J; R in Appendix F)")
    steps: int = retuned(SamplingOptions, "steps", DEFAULTS.pairs, "thought–answer pairs per rollout (N)")
    seed_pairs: int = option(DEFAULTS.seeds, "reasoning seeds (prefilled pairs) per rollout for the seeded "
                                             "condition (m; 0: unseeded only)", "-m", minimum=0)
    tau: int = option(DEFAULTS.tau, "lag τ of cos(h̄_n, h̄_{n+τ})", minimum=1)
    max_new_tokens: int = option(DEFAULTS.max_new_tokens, "token budget per rollout", minimum=1)
    seed_max_new_tokens: int = option(DEFAULTS.seed_max_new_tokens, "token budget per reasoning seed", minimum=1)
    max_solution_tokens: int = option(DEFAULTS.max_solution_tokens, "guided format: close a solution after this "
                                                                    "many tokens", minimum=1)
    temperature: float = option(DEFAULTS.temperature, "sampling temperature (0: greedy)", minimum=0)
    top_p: float = option(DEFAULTS.top_p, "nucleus sampling mass", above=0, maximum=1)
    format: str = option("guided" if DEFAULTS.guided else "free", "guided: the pair tags are written for the model; "
                         "free: prompt only (the paper's)", choices=("guided", "free"))
    embedding: str = option(DEFAULTS.embedding, "hidden: mean last hidden state of the model; sentence: "
                                                "all-MiniLM-L6-v2 (extra)", choices=EMBEDDINGS)
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


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "reasoning", ReasoningCommandConfig,
                         "chain-of-thought drift: centroid cosine of thought–answer pair embeddings", __doc__)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from beliefdrift.runs.reasoning import run_reasoning, summary_markdown
    from beliefdrift.runs.store import STORE_FILE

    settings = settings_from(args, ReasoningCommandConfig)
    summary = run_reasoning(settings)
    if summary is None:  # under torchrun rank 0 reports, once every rank has stored its questions
        return 0
    print(summary_markdown(summary))
    log.info("wrote %s, %s, %s", settings.out / STORE_FILE, settings.out / "summary.json", ", ".join(summary["figure"]))
    return 0
