"""`beliefdrift drift`: marginal drift of θ_n and a c.i.d. check for PPR-type methods (paper Figure 1).

For each question × method: J PPR paths of N answers; E[θ_n] ± std across paths against n, the label-free shift
‖E[θ_n] − E[θ_0]‖_1, and the first-half vs second-half answer-frequency difference (c.i.d. check). Stores each
question × method's records in the run store (resumable; under torchrun the questions are sharded over the
processes, write `-n` there); writes records.csv, summary.md/json and the figures.
"""

from __future__ import annotations

import argparse
import json
import logging

from beliefdrift.config.diagnostics import DriftConfig
from beliefdrift.config.options import add_command, settings_from
from beliefdrift.files import write_atomic

log = logging.getLogger(__name__)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "drift", DriftConfig, "marginal drift of θ_n and a c.i.d. check", __doc__)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from beliefdrift.report.diagnostics import drift_report
    from beliefdrift.report.text import wrote
    from beliefdrift.runs.diagnostics import run_drift
    from beliefdrift.runs.distributed import Ranks
    from beliefdrift.runs.store import STORE_FILE

    config = settings_from(args, DriftConfig)
    run = run_drift(config)
    if Ranks.from_env().rank != 0:  # under torchrun rank 0 reports, once every rank has stored its questions
        return 0
    report = drift_report(run.questions, run.methods, run.method_records(), config.out, config.dataset,
                          config.plot_questions)
    print(report.table)
    write_atomic(config.out / "summary.md", report.table + "\n")
    write_atomic(config.out / "summary.json", json.dumps(report.summary, indent=2) + "\n")
    log.info(wrote(config.out, [f"{STORE_FILE} (the records)", "records.csv", "summary.md", "summary.json",
                                f"{len(report.figures)} figure files (marginal_shift, marginal_drift*)"]))
    return 0
