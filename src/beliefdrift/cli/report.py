"""`beliefdrift report RUN_DIR [RUN_DIR …]`: the paper's tables and reliability diagrams from run stores.

Writes tables.md, tables.tex (Table 1: ACC/AUC, Table 2: ECE/NLL/BS; one column group per run),
metrics.csv (every method and estimator with intervals, n, excluded, nll_clipped), one reliability
diagram per method, and paired.md / paired.csv (each method's Δ against PPR). Questions failing
quality control are excluded per method and counted. Stores are opened read-only; an unfinished run is reported
as partial (results stored of planned) in every table's heading and on stdout, and questions skipped for a prompt
longer than the model's context are counted.

With `--html` it also writes explorer.html (and explorer-data/ beside it): the interactive run explorer
(`report.explorer`) over every RUN_DIR given, which may then also be the output of drift, emd, train or reasoning;
the tables cover the evaluate runs among them.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path

from beliefdrift.config.options import FIGURE_FORMATS, ReportOptions, add_command, option, settings_from
from beliefdrift.errors import UserError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReportConfig(ReportOptions):
    """Where the report goes and how it is drawn (the run directories are the command's arguments)."""

    _argument_group_name = "report"

    out: Path | None = option(None, "output directory (unset: the run directory; beliefdrift-out/report for "
                                    "several)", output="directory")
    figure_formats: list[str] = option(["png"], "formats of the reliability diagrams (png, and pdf for a PDF of "
                                                "each)", choices=FIGURE_FORMATS)
    html: bool = option(False, "also write explorer.html, an interactive page over every run directory given "
                               "(evaluate, drift, emd, train, reasoning)")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "report", ReportConfig, "tables and reliability diagrams from evaluation runs",
                         __doc__)
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories (each holding "
                                                                               "run.sqlite; with --html any "
                                                                               "command's output)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from beliefdrift.report.runs import REPORT_FILES, write_report

    config = settings_from(args, ReportConfig)
    out = config.out or (args.runs[0] if len(args.runs) == 1 else Path("beliefdrift-out/report"))
    if not config.html:
        for run_dir in args.runs:
            check_evaluated(run_dir)
    evaluated = [run for run in args.runs if has_results(run)] if config.html else args.runs
    if evaluated:
        markdown, files = write_report(evaluated, out, config.quality_control, config.bootstrap,
                                       config.figure_formats)
        print(markdown)
        log.info("wrote %d files to %s (%s)", len(files), out, REPORT_FILES)
    if config.html:
        from beliefdrift.report.explorer import write_explorer
        from beliefdrift.report.html import environment

        log.info("wrote %s", write_explorer(args.runs, out, config.quality_control, config.bootstrap, environment()))
    return 0


def check_evaluated(run_dir: Path) -> None:
    """A UserError naming `run_dir` when its run store holds another command's run (drift, emd, reasoning): the
    tables are made of evaluate results (a missing store is named where the report reads it)."""
    from beliefdrift.runs.store import STORE_FILE, RunStore

    if (run_dir / STORE_FILE).is_file():
        with RunStore.open(run_dir / STORE_FILE, read_only=True) as store:
            command = store.config().get("command", "evaluate")
        if command != "evaluate":
            raise UserError(f"{run_dir}: a {command} run; report's tables are made of evaluate runs (report --html "
                            "writes an explorer page over any command's runs)")


def has_results(run_dir: Path) -> bool:
    """Whether `run_dir` holds an evaluate run store with results (what the tables are made of)."""
    from beliefdrift.runs.store import STORE_FILE, RunStore

    if not (run_dir / STORE_FILE).is_file():
        return False
    with RunStore.open(run_dir / STORE_FILE, read_only=True) as store:
        return store.count() > 0
