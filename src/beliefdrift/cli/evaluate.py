"""`beliefdrift evaluate`: the paper's methods on a benchmark, stored in `<out>/run.sqlite`, then reported.

Methods: direct, ppr, ppr-seed<m>, am-ppr[-seed<m>] (needs --adapter, a LoRA adapter directory).
Settings come from the built-in defaults, then a `--config` YAML preset, then the flags given here.
Interrupted runs resume where they stopped when the same command is run again; under
`torchrun --nproc_per_node=P -m beliefdrift evaluate …` the questions are sharded over P processes
into the same store (write `-n` there, not `--n`: torchrun rejects `--n` as an ambiguous abbreviation of
its own options).
"""

from __future__ import annotations

import argparse
import logging

from beliefdrift.config.evaluate import EvalConfig, resolve_methods
from beliefdrift.config.options import add_command, settings_from

log = logging.getLogger(__name__)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "evaluate", EvalConfig,
                         "run the paper's methods on a benchmark and report the metrics", __doc__)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from beliefdrift.report.runs import REPORT_FILES, write_report
    from beliefdrift.runs.distributed import Ranks
    from beliefdrift.runs.evaluate import evaluate

    config = resolve_methods(settings_from(args, EvalConfig), given="methods" in args.given)
    ranks = Ranks.from_env()
    if ranks.rank == 0:
        log.info("%s: methods %s; J=%d paths, N=%d answers; model %s%s%s", config.dataset, ", ".join(config.methods),
                 config.paths, config.steps, config.model, f" + adapter {config.adapter}" if config.adapter else "",
                 f"; {ranks.world_size} ranks" if ranks.world_size > 1 else "")
    store = evaluate(config, config.out, ranks=ranks)
    if ranks.rank != 0:
        return 0
    markdown, files = write_report([config.out], config.out, config.quality_control, config.bootstrap)
    print(markdown)
    log.info("results in %s; wrote %d report files (%s) to %s", store, len(files), REPORT_FILES, config.out)
    return 0
