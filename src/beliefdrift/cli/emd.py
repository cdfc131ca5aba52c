"""`beliefdrift emd`: expected martingale drift (paper §5.1, Figure 3) with a c.i.d. check beside it.

For each question × method: EMD‾ (d(p^(k)_n, p^(1)_n) averaged over k = 2 … K at one of the top-K prefixes of each
length n ∈ 𝒩), EMD_k(b) at sampled burn-in prefixes b = 0 … B, and the c.i.d. check on J × N PPR paths. Stores
each question × method's records in the run store (resumable; under torchrun the questions are sharded over the
processes, write `-n` there); writes records.csv, summary.md/json, EMD‾ bars and
EMD_k(b) curves. Beside every EMD figure: its noise floor, the EMD the same estimator gives for Pólya-urn
martingales matched to each record, computed from the stored records with its own
generators (the measured numbers do not depend on it; stores from before it show no floor). After the table: each
method's paired Δ EMD‾ against PPR over the same questions.
"""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from beliefdrift.config.diagnostics import (
    BATCH_BUDGET,
    DISTANCE_NAMES,
    EXACT_BUDGET,
    DiagnosticsConfig,
    EMDConfig,
)
from beliefdrift.config.options import SamplingOptions, add_command, option, out_option, retuned, settings_from
from beliefdrift.files import write_atomic

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EMDCommandConfig(DiagnosticsConfig):
    """The settings of `beliefdrift emd`: -J is the number of Monte Carlo continuations per k-step estimate and of
    c.i.d. paths; -N the c.i.d. path length; --batch-questions batches the c.i.d. and floor paths of several
    questions (each question's k-step estimates fill up to --batch-budget paths per forward pass on their own)."""

    _argument_group_name = "EMD"

    paths: int = retuned(SamplingOptions, "paths", 32, "Monte Carlo continuations per k-step estimate and c.i.d. "
                                                       "paths (J)")
    horizon: int = option(10, "EMD‾ averages k = 2 … K", "-K", minimum=2)
    prefix_lengths: list[int] = option([0, 2, 4, 6, 8], "prefix lengths 𝒩 of EMD‾", minimum=0)
    top_k: int = option(5, "a prefix is drawn from the top-k prefixes of each length", minimum=1)
    burn_in: int = option(10, "EMD_k(b) for b = 0 … this", minimum=0)
    lookahead: int = option(10, "the horizon k of EMD_k(b)", "-k", minimum=2)
    burn_in_paths: int = option(1, "sampled burn-in prefixes per question", minimum=1)
    distance: list[str] = option(["l1", "kl"], "distances: l1, kl and tv (total variation = ½ L1)",
                                 choices=DISTANCE_NAMES)
    exact_budget: int = option(EXACT_BUDGET, "enumerate p^(k) exactly when |options|^(k-1) ≤ this, else Monte Carlo",
                                minimum=0)
    batch_budget: int = option(BATCH_BUDGET, "most paths per forward pass", operational=True, minimum=1)
    noise_floor_replicates: int = option(100, "EMD of R matched Pólya-urn martingales per question: the floor printed "
                                              "beside every EMD figure, with its 95%% interval and whether EMD lies "
                                              "above it (0: off)", operational=True, minimum=0, metavar="R")
    out: Path = out_option("beliefdrift-out/emd")

    @property
    def emd(self) -> EMDConfig:
        return EMDConfig(horizon=self.horizon, prefix_lengths=tuple(self.prefix_lengths), top_k=self.top_k,
                         num_rollouts=self.paths, burn_in=self.burn_in, k=self.lookahead,
                         burn_in_paths=self.burn_in_paths, exact_budget=self.exact_budget,
                         batch_budget=self.batch_budget)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "emd", EMDCommandConfig,
                         "expected martingale drift (EMD‾, EMD_k(b)) and a c.i.d. check", __doc__)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from beliefdrift.diagnostics.noise_floor import method_floors, missing_fields
    from beliefdrift.report.diagnostics import emd_report
    from beliefdrift.runs.diagnostics import run_emd
    from beliefdrift.runs.distributed import Ranks

    settings = settings_from(args, EMDCommandConfig)
    config = settings.emd
    run = run_emd(settings, config)
    if Ranks.from_env().rank != 0:  # under torchrun rank 0 reports, once every rank has stored its questions
        return 0
    questions, methods, records = run.questions, run.methods, run.method_records()
    missing = missing_fields([r for m in methods for r in records[m.name]])
    if settings.noise_floor_replicates and missing:
        log.warning("no noise floor: records stored before it existed lack %s (new --out for one)",
                    ", ".join(missing))
    floors = method_floors(questions, methods, records, seed=settings.seed, config=config,
                           replicates=settings.noise_floor_replicates, distances=settings.distance,
                           ) if settings.noise_floor_replicates and not missing else {}
    report = emd_report(questions, methods, records, floors, settings.distance, settings.horizon,
                        settings.lookahead, settings.burn_in, settings.out, settings.dataset)
    print(report.table)
    write_atomic(settings.out / "summary.md", report.table + "\n")
    write_atomic(settings.out / "summary.json", json.dumps(report.summary, indent=2) + "\n")
    log.info("wrote %s/summary.md, records.csv, emd_bar_*.png/pdf and emd_k_b_*.png/pdf", settings.out)
    return 0
