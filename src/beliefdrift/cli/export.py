"""`beliefdrift export RUN_DIR --format jsonl|parquet`: a run's results as one row per question × method.

Any command's run directory (evaluate, drift, emd, reasoning), finished or partial. A row holds the question id,
the method (or reasoning condition) and what the run stored for it: an evaluate run's estimate (probs), the other
estimators' (estimates), the target, the mean label mass and the paths' answers, seeds and θ trajectories; a
diagnostic run's quantities (drift's marginal means, the EMD of each question, …). Nested values are JSON lists
(in parquet, JSON text).
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path

from beliefdrift.config.options import Settings, add_command, option, path_argument, settings_from
from beliefdrift.files import check_not_a_store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExportConfig(Settings):
    """The export's format and file (the run directory is the command's argument)."""

    _argument_group_name = "export"

    format: str = option("jsonl", "jsonl: one JSON object per line; parquet: a table", choices=("jsonl", "parquet"))
    out: Path | None = option(None, "output file (unset: RUN_DIR/export.jsonl or RUN_DIR/export.parquet)",
                              output="file")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "export", ExportConfig, "a run's results as one row per question × method",
                         __doc__)
    parser.add_argument("run", type=path_argument, metavar="RUN_DIR", help="run directory (holding run.sqlite)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from beliefdrift.runs.results import open_run, write_export

    config = settings_from(args, ExportConfig)
    run = open_run(args.run)
    out = config.out or run.path / f"export.{config.format}"
    check_not_a_store(out, "--out", own_run=run.path)  # an export never replaces a run store or another run's file
    out = write_export(run, out, config.format)
    log.info("wrote %s", out)
    return 0
