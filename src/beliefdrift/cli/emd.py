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
import logging

from beliefdrift.config.diagnostics import EMDCommandConfig
from beliefdrift.config.options import add_command, settings_from

log = logging.getLogger(__name__)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "emd", EMDCommandConfig,
                         "expected martingale drift (EMD‾, EMD_k(b)) and a c.i.d. check", __doc__)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from beliefdrift.report.diagnostics import write_emd_report
    from beliefdrift.report.text import wrote
    from beliefdrift.runs.diagnostics import run_emd
    from beliefdrift.runs.distributed import Ranks
    from beliefdrift.runs.store import STORE_FILE

    settings = settings_from(args, EMDCommandConfig)
    run = run_emd(settings)
    if Ranks.from_env().rank != 0:  # under torchrun rank 0 reports, once every rank has stored its questions
        return 0
    print(write_emd_report(settings, run).table)
    log.info(wrote(settings.out, [f"{STORE_FILE} (the records)", "records.csv", "summary.md", "summary.json",
                                  "emd_bar_*.png/pdf", "emd_k_b_*.png/pdf"]))
    return 0
