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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from beliefdrift.config.options import (
    FIGURE_FORMATS,
    ReportOptions,
    add_command,
    option,
    path_argument,
    settings_from,
)
from beliefdrift.errors import UserError, first_line
from beliefdrift.files import check_directory, is_run_directory, same_path

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
    parser.add_argument("runs", nargs="+", type=path_argument, metavar="RUN_DIR",
                        help="run directories (each holding run.sqlite; with --html any command's output)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from beliefdrift.report.runs import REPORT_FILES, write_report

    config = settings_from(args, ReportConfig)
    for run_dir in args.runs:
        check_directory(run_dir, "RUN_DIR")
    out = config.out or (args.runs[0] if len(args.runs) == 1 else Path("beliefdrift-out/report"))
    check_output_directory(out, args.runs)
    if not config.html:
        for run_dir in args.runs:
            check_evaluated(run_dir)
    else:
        for run_dir in args.runs:
            check_run_files(run_dir)
    counts = {run: stored_results(run) for run in args.runs}
    evaluated = [run for run in args.runs if counts[run]] if config.html else args.runs
    config.check_memory(questions=max(counts.values(), default=0))
    if evaluated:
        markdown, files = write_report(evaluated, out, config.quality_control, config.bootstrap,
                                       config.figure_formats)
        print(markdown)
        log.info("wrote %d files to %s (%s)", len(files), out, REPORT_FILES)
    if config.html:
        from beliefdrift.data.lm_eval import no_task_code
        from beliefdrift.report.explorer import write_explorer
        from beliefdrift.report.html import environment

        with no_task_code():  # a run's stored settings may name a task file: its hooks are never run here
            page = write_explorer(args.runs, out, config.quality_control, config.bootstrap, environment())
        log.info("wrote %s", page)
    return 0


def check_output_directory(out: Path, runs: list[Path]) -> None:
    """The report's directory is not another run's: a directory holding a run store is the output of that run
    (its tables.md, …), written only by a report of that run."""
    if is_run_directory(out) and not any(same_path(out, run) for run in runs):
        raise UserError(f"--out {out}: holds another run (its run.sqlite), whose tables this report would replace; "
                        "choose another directory, or give that run as a RUN_DIR")


def check_run_files(run_dir: Path) -> None:
    """The files of `run_dir` the explorer reads besides its store (train's config.yaml and log.csv, reasoning's
    summary.json) are what they should be, else a UserError naming the file (read with the bounded YAML reader:
    an alias bomb in a config.yaml would hang it)."""
    import csv
    import json

    from beliefdrift.errors import not_utf8
    from beliefdrift.yaml_files import read_yaml

    if (run_dir / "config.yaml").is_file():
        read_yaml(run_dir / "config.yaml", str(run_dir / "config.yaml"))
    readers: dict[str, Callable[[str], object]] = {"summary.json": json.loads,
                                                   "log.csv": lambda text: list(csv.DictReader(text.splitlines()))}
    for name, parse in readers.items():
        path = run_dir / name
        if not path.is_file():
            continue
        data = path.read_bytes()
        try:
            parse(data.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise UserError(not_utf8(str(path), err)) from None
        except (ValueError, csv.Error) as err:
            raise UserError(f"{path}: not a readable {name} ({first_line(err)}); restore it or move it away") from None


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


def stored_results(run_dir: Path) -> int:
    """How many question × method results the run store of `run_dir` holds (what the tables are made of; 0 without
    one)."""
    from beliefdrift.runs.store import STORE_FILE, RunStore

    if not (run_dir / STORE_FILE).is_file():
        return 0
    with RunStore.open(run_dir / STORE_FILE, read_only=True) as store:
        return store.count()
