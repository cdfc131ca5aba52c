"""`beliefdrift export RUN_DIR [--out FILE] [--format jsonl|csv|parquet]`: a run's results as one row per
question × method.

Any command's run directory (evaluate, drift, emd, reasoning), finished or partial. A row holds the question id,
the method (or reasoning condition) and what the run stored for it: an evaluate run's estimate (probs), the other
estimators' (estimates), the target, the mean label mass and the paths' answers, seeds and θ trajectories; a
diagnostic run's quantities (drift's marginal means, the EMD of each question, …). Nested values are JSON lists
(in CSV and parquet, JSON text). The format is --format, else the one --out's suffix names (.jsonl, .csv,
.parquet), else jsonl; a suffix naming another format than --format is refused. --out is a new file or a regular
file (replaced atomically; a link, a device or a pipe is refused), or `-` for standard output.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path

from beliefdrift.config.options import Settings, add_command, option, path_argument, settings_from
from beliefdrift.files import check_not_a_store, check_output

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExportConfig(Settings):
    """The export's format and file (the run directory is the command's argument)."""

    _argument_group_name = "export"

    format: str | None = option(None, "jsonl: one JSON object per line; csv: a table; parquet: a table (unset: "
                                      "--out's suffix, else jsonl)", choices=("jsonl", "csv", "parquet"))
    out: Path | None = option(None, "output file, or - for standard output (unset: RUN_DIR/export.<format>)",
                              output="file")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "export", ExportConfig, "a run's results as one row per question × method",
                         __doc__)
    parser.add_argument("run", type=path_argument, metavar="RUN_DIR", help="run directory (holding run.sqlite)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from beliefdrift.runs.results import STDOUT, export_format, open_run, write_export

    config = settings_from(args, ExportConfig)
    run = open_run(args.run)
    out = config.out or run.path / f"export.{config.format or 'jsonl'}"
    format = export_format(out, config.format)
    if str(out) != STDOUT:
        check_output(out, "--out", "file")  # the default too: a regular file or a new one, never opened to look
        check_not_a_store(out, "--out", own_run=run.path)  # never a run store, nor another run's file
    out = write_export(run, out, format)
    log.info("wrote %s", "the export to standard output" if str(out) == STDOUT else out)
    return 0
