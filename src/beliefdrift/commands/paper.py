"""`beliefdrift paper --preset {cpu,paper} --out DIR`: the whole paper, one stage per existing command, resumable.

A preset (configs/paper-cpu.yaml, configs/paper-full.yaml, or a YAML path) lists the stages in order: train (AM-PPR on
the CSQA train split), evaluate-* (the method tables), drift (Figure 1), emd-* (EMD‾, EMD_k(b)), reasoning-* (the
chain-of-thought appendix) and report. Each stage is the argument list of its command, run in-process through
`beliefdrift.cli.main` into DIR/<stage>/, so its output is what that command alone writes (`--list-stages` prints the
command lines). DIR/stages.json records each stage's command line, status and wall time: a stage done with the same
command line is skipped on a re-run, any other continues its own directory (which refuses changed settings). The
report stage writes DIR/report/ (tables.md, tables.tex, metrics.csv) and DIR/report.html (self-contained).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from beliefdrift.cli import main
from beliefdrift.config import Settings, add_command, option, out_option, preset_file, settings_from
from beliefdrift.data.registry import DATA_ENV
from beliefdrift.errors import UserError
from beliefdrift.files import write_atomic
from beliefdrift.report.html import environment, write_html
from beliefdrift.store import STORE_FILE

#: Preset names and their files under the source tree's configs/.
PRESETS = {"cpu": "paper-cpu.yaml", "paper": "paper-full.yaml"}
#: The commands a stage may run, and the settings (preset `settings`, --model, …) every model command takes.
STAGE_COMMANDS = ("train", "evaluate", "drift", "emd", "reasoning", "report")
COMMON = ("model", "device", "dtype", "seed", "data_dir")
STAGE_KEYS = {"command", "about", "config", "args", "requires", "runs"}
STAGES_FILE = "stages.json"


@dataclass(frozen=True)
class Stage:
    """One command of the paper: `args` are its flags (`key: value`, over the YAML `config` it is given),
    `requires` data files under the data directory without which it is skipped, `runs` (report) the stages
    whose run stores it reports."""

    name: str
    command: str
    about: str = ""
    config: Path | None = None
    args: dict[str, Any] | None = None
    requires: tuple[str, ...] = ()
    runs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Preset:
    path: Path
    settings: dict[str, Any]
    stages: list[Stage]


@dataclass(frozen=True)
class PaperConfig(Settings):
    """The settings of `beliefdrift paper`: a preset of stages, and what every stage shares."""

    _argument_group_name = "paper"

    preset: str = option("cpu", f"{' or '.join(PRESETS)} (configs/{', configs/'.join(PRESETS.values())}) or a YAML "
                                "path")
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


def preset_path(spec: str) -> Path:
    """The bundled preset a name (`cpu`, `paper`) stands for, or `spec` as a preset name or YAML path."""
    path = preset_file(PRESETS.get(spec, spec))
    if not path.is_file():
        raise FileNotFoundError(f"--preset {spec}: {path} not found (expected {', '.join(PRESETS)} or a YAML file)")
    return path


def load_paper_preset(spec: str) -> Preset:
    """The preset's common settings and stages; unknown keys and commands are an error naming the stage."""
    path = preset_path(spec)
    values = yaml.safe_load(path.read_text()) or {}
    if not isinstance(values, dict) or not isinstance(values.get("stages"), dict) or set(values) - {"settings",
                                                                                                   "stages"}:
        raise UserError(f"--preset {path}: expected a mapping with `settings` and `stages` (a mapping of stages)")
    settings = values.get("settings") or {}
    unknown = sorted(set(settings) - set(COMMON))
    if unknown:
        raise UserError(f"--preset {path}: unknown settings {unknown}; common settings are {', '.join(COMMON)} "
                        "(put the others under a stage's args)")
    stages = []
    for name, entry in values["stages"].items():
        if not isinstance(entry, dict) or entry.get("command") not in STAGE_COMMANDS or set(entry) - STAGE_KEYS:
            raise UserError(f"--preset {path}: stage {name}: expected a mapping with a command among "
                            f"{', '.join(STAGE_COMMANDS)} and keys among {', '.join(sorted(STAGE_KEYS))}")
        config = entry.get("config")
        stages.append(Stage(name, entry["command"], entry.get("about", ""),
                            (path.parent / config).resolve() if config else None, dict(entry.get("args") or {}),
                            tuple(entry.get("requires") or ()), tuple(entry.get("runs") or ())))
    return Preset(path.resolve(), settings, stages)


def flags(values: dict[str, Any]) -> list[str]:
    """`--key value` per setting: a list's items as separate words, booleans as true/false, null left out."""
    argv = []
    for key, value in values.items():
        if value is None:
            continue
        argv.append("--" + key.replace("_", "-"))
        items = value if isinstance(value, list) else [value]
        argv += [str(item).lower() if isinstance(item, bool) else str(item) for item in items]
    return argv


def stage_argv(stage: Stage, settings: dict[str, Any], out: Path, stages: list[Stage]) -> list[str]:
    """The stage's command line, writing into `out/<stage>`; `{out}` in a value stands for `out`."""
    target = str(out / stage.name)
    args = {key: value.replace("{out}", str(out)) if isinstance(value, str) else value
            for key, value in (stage.args or {}).items()}
    if stage.command == "report":
        return ["report", *map(str, report_runs(stage, out, stages)), "--out", target, *flags(args)]
    config = ["--config", str(stage.config)] if stage.config else []
    return [stage.command, *config, *flags({**settings, **args}), "--out", target]


def report_runs(stage: Stage, out: Path, stages: list[Stage]) -> list[Path]:
    """The run directories of the stages a report stage names (in its order) that hold a run store."""
    known = {s.name for s in stages}
    return [out / name for name in stage.runs if name in known and (out / name / STORE_FILE).is_file()]


def missing_requirement(stage: Stage, settings: dict[str, Any], out: Path, stages: list[Stage]) -> str | None:
    """Why the stage cannot run (a required data file is absent, nothing to report), or None."""
    root = settings.get("data_dir")
    for relative in stage.requires:
        if not root or not (Path(root) / relative).is_file():
            return f"{relative} not found under the data directory ({root or f'--data-dir / ${DATA_ENV} unset'})"
    if stage.command == "report" and not report_runs(stage, out, stages):
        return "no evaluation run to report"
    return None


def load_record(out: Path) -> dict[str, Any]:
    path = out / STAGES_FILE
    return json.loads(path.read_text()) if path.is_file() else {"stages": {}}


def save_record(out: Path, record: dict[str, Any]) -> None:
    write_atomic(out / STAGES_FILE, json.dumps(record, indent=1) + "\n")


def select(preset: Preset, wanted: list[str] | None) -> list[Stage]:
    if not wanted:
        return preset.stages
    known = [stage.name for stage in preset.stages]
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise UserError(f"--stages: unknown stages {unknown}; {preset.path.name} has {', '.join(known)}")
    return [stage for stage in preset.stages if stage.name in wanted]


def run(parsed: argparse.Namespace) -> int:
    args = settings_from(parsed, PaperConfig)
    preset = load_paper_preset(args.preset)
    overrides = {"model": args.model, "device": args.device,
                 "data_dir": args.data_dir or preset.settings.get("data_dir") or os.environ.get(DATA_ENV)}
    settings = {**preset.settings, **{key: value for key, value in overrides.items() if value}}
    stages = select(preset, args.stages)
    record = load_record(args.out)
    if args.list_stages:
        for stage in stages:
            status = record["stages"].get(stage.name, {}).get("status", "not run")
            print(f"{stage.name} [{status}]: {stage.about}\n    beliefdrift "
                  + shlex.join(stage_argv(stage, settings, args.out, preset.stages)))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    record.update(preset=str(preset.path), settings=settings, environment=environment())
    ran = False  # a report is redone after any stage ran
    for stage in stages:
        argv = stage_argv(stage, settings, args.out, preset.stages)
        previous = record["stages"].get(stage.name, {})
        if (previous.get("status") == "done" and previous.get("argv") == argv and (args.out / stage.name).is_dir()
                and not (ran and stage.command == "report")):
            print(f"== {stage.name}: done earlier ({previous['seconds']:.0f} s), skipped", file=sys.stderr)
            continue
        entry: dict[str, Any] = {"command": stage.command, "about": stage.about, "argv": argv,
                                 "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        why = missing_requirement(stage, settings, args.out, preset.stages)
        if why:
            print(f"== {stage.name}: skipped, {why}", file=sys.stderr)
            record["stages"][stage.name] = {**entry, "status": "skipped", "reason": why, "seconds": 0.0}
            save_record(args.out, record)
            continue
        print(f"== {stage.name}: beliefdrift {shlex.join(argv)}", file=sys.stderr, flush=True)
        # an interrupted or failed attempt with the same command line counts towards the stage's wall time
        earlier = previous.get("seconds", 0.0) if previous.get("argv") == argv and previous.get("status") in (
            "interrupted", "failed") else 0.0
        start, ran = time.perf_counter(), True
        code = main(argv)
        status = {0: "done", 130: "interrupted"}.get(code, "failed")
        record["stages"][stage.name] = {**entry, "status": status, "exit_code": code,
                                        "seconds": round(earlier + time.perf_counter() - start, 3)}
        save_record(args.out, record)
        if code:
            print(f"beliefdrift paper: stage {stage.name} {status} (exit {code}); run the same command again to "
                  "resume", file=sys.stderr)
            return code
        if stage.command == "report":
            print(f"wrote {write_html(args.out, record, preset.stages)}")
    return 0
