"""`beliefdrift evaluate`: the paper's methods on a benchmark, stored in `<out>/run.sqlite`, then reported.

Methods: direct, ppr, ppr-seed<m>, am-ppr[-seed<m>] (needs --adapter, a LoRA adapter directory).
Settings come from the built-in defaults, then a `--config` YAML preset, then the flags given here.
Interrupted runs resume where they stopped when the same command is run again; under
`torchrun --nproc_per_node=P -m beliefdrift evaluate …` the questions are sharded over P processes
into the same store (write `-n` there, not `--n`: torchrun rejects `--n` as an ambiguous abbreviation of
its own options). At the end a warning names each method whose questions quality control excludes, and
summary.json says what it dropped (`all_excluded`: the methods it left without a question).
"""

from __future__ import annotations

import argparse
import json
import logging

from beliefdrift.config.evaluate import EvalConfig, resolve_methods
from beliefdrift.config.options import add_command, settings_from

log = logging.getLogger(__name__)

#: The run's summary beside its report: what quality control dropped (`Run.quality_control`), with `all_excluded`
#: naming the methods left without a question.
SUMMARY = "summary.json"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "evaluate", EvalConfig,
                         "run the paper's methods on a benchmark and report the metrics", __doc__)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from beliefdrift.files import write_atomic
    from beliefdrift.report.runs import REPORT_FILES, write_report
    from beliefdrift.report.text import wrote
    from beliefdrift.runs.distributed import Ranks
    from beliefdrift.runs.evaluate import run_evaluation
    from beliefdrift.runs.results import open_run

    config = resolve_methods(settings_from(args, EvalConfig), given="methods" in args.given)
    ranks = Ranks.from_env()
    if ranks.rank == 0:
        log.info("%s: methods %s; J=%d paths, N=%d answers; model %s%s%s", config.dataset, ", ".join(config.methods),
                 config.paths, config.steps, config.model, f" + adapter {config.adapter}" if config.adapter else "",
                 f"; {ranks.world_size} ranks" if ranks.world_size > 1 else "")
    store = run_evaluation(config, ranks=ranks)
    if ranks.rank != 0:
        return 0
    markdown, files = write_report([config.out], config.out, config.quality_control, config.bootstrap)
    quality = open_run(config.out).quality_control(config.quality_control)
    write_atomic(config.out / SUMMARY, json.dumps({"quality_control": quality.as_dict()}, indent=2) + "\n")
    print(markdown)
    log.info(wrote(config.out, [f"{store.name} (the results)", f"{SUMMARY} (quality control; all_excluded: "
                                f"{', '.join(quality.all_excluded) or 'none'})", f"{len(files)} report files "
                                f"({REPORT_FILES})"]))
    return 0
