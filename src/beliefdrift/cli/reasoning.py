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

from beliefdrift.config.options import add_command, settings_from
from beliefdrift.config.reasoning import ReasoningCommandConfig

log = logging.getLogger(__name__)


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
