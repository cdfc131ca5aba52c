"""`beliefdrift paper --preset {cpu,paper} --out DIR`: the whole paper, one stage per existing command, resumable.

A preset (configs/paper-cpu.yaml, configs/paper-full.yaml, or a YAML path) lists the stages in order: train (AM-PPR
on the CSQA train split), evaluate-* (the method tables), drift (Figure 1), emd-* (EMD‾, EMD_k(b)), reasoning-* (the
chain-of-thought appendix) and report. Each stage is the argument list of its command, run in this process into
DIR/<stage>/, so its output is what that command alone writes (`--list-stages` prints the command lines).
DIR/stages.json records each stage's command line, status and wall time: a stage done with the same command line is
skipped on a re-run, any other continues its own directory (which refuses changed settings). The report stage writes
DIR/report/ (tables.md, tables.tex, metrics.csv, paired.md/csv, reliability diagrams), DIR/report.html
(self-contained) and DIR/explorer.html, the interactive run explorer over every finished stage.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from beliefdrift.config.options import PAPER_PRESETS, Settings, add_command, option, out_option, settings_from
from beliefdrift.data.registry import DATA_ENV


@dataclass(frozen=True)
class PaperConfig(Settings):
    """The settings of `beliefdrift paper`: a preset of stages, and what every stage shares."""

    _argument_group_name = "paper"

    preset: str = option("cpu", f"{' or '.join(PAPER_PRESETS)} (configs/{', configs/'.join(PAPER_PRESETS.values())}) "
                                "or a YAML path")
    model: str | None = option(None, "override the preset's model in every stage")
    device: str | None = option(None, "override the preset's device in every stage (cpu, cuda, auto)")
    data_dir: str | None = option(None, f"benchmark data directory (${DATA_ENV}) for every stage")
    stages: list[str] | None = option(None, "stages to run (default: all, in the preset's order)")
    list_stages: bool = option(False, "print each stage's command line and status")
    out: Path = out_option("beliefdrift-out/paper")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "paper", PaperConfig, "run the whole paper (train, evaluate, drift, emd, "
                                                           "reasoning, report) as one resumable command", __doc__)
    parser.set_defaults(func=run)


def run(parsed: argparse.Namespace) -> int:
    from beliefdrift.cli.main import main
    from beliefdrift.cli.pipeline import check_dependencies, list_stages, load_paper_preset, run_stages, select

    args = settings_from(parsed, PaperConfig)
    preset = load_paper_preset(args.preset)
    overrides = {"model": args.model, "device": args.device,
                 "data_dir": args.data_dir or preset.settings.get("data_dir") or os.environ.get(DATA_ENV)}
    settings = {**preset.settings, **{key: value for key, value in overrides.items() if value}}
    stages = select(preset, args.stages)
    if args.list_stages:
        print(list_stages(stages, settings, args.out, preset))
        return 0
    check_dependencies(stages, args.out)
    return run_stages(stages, settings, args.out, preset, main)
