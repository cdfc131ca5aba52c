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
import sys

from beliefdrift.commands.common import (
    add_data_args,
    add_model_args,
    add_output_args,
    add_sampling_args,
    add_template_ending_arg,
)
from beliefdrift.commands.report import add_report_args, write_report
from beliefdrift.distributed import Ranks
from beliefdrift.evaluation import evaluate
from beliefdrift.evaluation_config import CONFIG_KEYS, EvalConfig, load_preset, resolve_config


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    defaults = EvalConfig()
    parser = subparsers.add_parser(
        "evaluate", help="run the paper's methods on a benchmark and report the metrics", description=__doc__,
        epilog="built-in defaults: " + ", ".join(f"{key}={getattr(defaults, key)}" for key in CONFIG_KEYS),
    )
    parser.add_argument("--config", help="YAML preset of settings (e.g. configs/paper.yaml); flags override it")
    add_model_args(parser)
    add_template_ending_arg(parser)
    parser.add_argument("--adapter", help="LoRA adapter directory of the SC-tuned model (for am-ppr methods)")
    add_sampling_args(parser, paths=defaults.paths, steps=defaults.steps)
    add_data_args(parser)
    parser.add_argument("--methods", nargs="+", help="e.g. direct ppr ppr-seed1 ppr-seed5 (or comma-separated)")
    add_output_args(parser, "beliefdrift-out/evaluate")
    parser.add_argument("--batch-questions", type=int,
                        help="questions whose paths advance together in one engine batch (default: 16 on a GPU, 1 on "
                             "the CPU); the results do not depend on it")
    parser.add_argument("--skip-long-prompts", action="store_true",
                        help="skip (and count) questions whose prompt, seeds and answers exceed the model's context "
                             "instead of stopping at the first")
    add_report_args(parser)
    # Settings are only taken from the command line when given, so that a preset can supply the rest.
    for action in parser._actions:
        if action.dest in CONFIG_KEYS:
            action.default = argparse.SUPPRESS
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    preset = load_preset(args.config) if args.config else {}
    given = {key: getattr(args, key) for key in CONFIG_KEYS if hasattr(args, key)}
    config = resolve_config(preset, given)
    ranks = Ranks.from_env()
    if ranks.rank == 0:
        print(f"{config.dataset}: methods {', '.join(config.methods)}; J={config.paths} paths, "
              f"N={config.steps} answers; model {config.model}"
              + (f" + adapter {config.adapter}" if config.adapter else "")
              + (f"; {ranks.world_size} ranks" if ranks.world_size > 1 else ""), file=sys.stderr, flush=True)
    store = evaluate(config, args.out, ranks=ranks)
    if ranks.rank != 0:
        return 0
    markdown, files = write_report([args.out], args.out, config.quality_control, args.bootstrap)
    print(markdown)
    print(f"results in {store}; wrote {len(files)} report files (tables.md, tables.tex, metrics.csv, "
          f"reliability diagrams) to {args.out}")
    return 0
