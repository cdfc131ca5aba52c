"""The whole paper as stages: a preset (bundled `paper-cpu.yaml`, `paper-full.yaml`, or a YAML path) lists each
stage's command and flags; `run_stages` runs them in order into `DIR/<stage>/` through a given command runner (the
CLI's `main`, so a stage writes exactly what its command alone writes), records each stage's command line, status
and wall time in `DIR/stages.json`, skips stages done earlier with the same command line, and writes
`DIR/report.html` after the report stage.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from beliefdrift.config.options import PAPER_PRESETS, ReportOptions, preset_file
from beliefdrift.credentials import redacted
from beliefdrift.data.registry import DATA_ENV
from beliefdrift.errors import UserError
from beliefdrift.files import safe_name, write_atomic
from beliefdrift.registry import did_you_mean
from beliefdrift.runs.store import STORE_FILE
from beliefdrift.yaml_files import read_yaml

log = logging.getLogger(__name__)

#: Preset names and their files under the source tree's configs/.
#: The commands a stage may run, and the settings (preset `settings`, --model, …) every model command takes.
STAGE_COMMANDS = ("train", "evaluate", "drift", "emd", "reasoning", "report")
COMMON = ("model", "device", "dtype", "seed", "data_dir")
STAGE_KEYS = {"command", "about", "config", "args", "requires", "runs"}
#: What each stage key that holds more than a line of text must be (a list's items and a mapping's keys: strings).
STAGE_VALUES: dict[str, tuple[type, str]] = {
    "config": (str, "the path of a --config YAML file"),
    "args": (dict, "a mapping of the command's settings"),
    "requires": (list, "a list of files under the data directory"),
    "runs": (list, "a list of stage names"),
}
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


def preset_path(spec: str) -> Path:
    """The bundled preset a name (`cpu`, `paper`) stands for, or `spec` as a preset name or YAML path."""
    path = preset_file(PAPER_PRESETS.get(spec, spec))
    if not path.is_file():
        raise FileNotFoundError(f"--preset {spec}: {path} not found (expected {', '.join(PAPER_PRESETS)} or a YAML "
                                "file)" + did_you_mean(spec, PAPER_PRESETS))
    return path


def load_paper_preset(spec: str) -> Preset:
    """The preset's common settings and stages; unknown keys and commands are an error naming the stage."""
    path = preset_path(spec)
    values = read_yaml(path, f"--preset {path}") or {}
    if not isinstance(values, dict) or not isinstance(values.get("stages"), dict) or set(values) - {"settings",
                                                                                                   "stages"}:
        raise UserError(f"--preset {path}: expected a mapping with `settings` and `stages` (a mapping of stages)")
    settings = values.get("settings") or {}
    if not isinstance(settings, dict):
        raise UserError(f"--preset {path}: settings: expected a mapping of {', '.join(COMMON)}, got "
                        f"{type(settings).__name__}")
    unknown = sorted(set(settings) - set(COMMON), key=str)
    if unknown:
        raise UserError(f"--preset {path}: unknown settings {unknown}; common settings are {', '.join(COMMON)} "
                        "(put the others under a stage's args)")
    stages = []
    for name, entry in values["stages"].items():
        if safe_name(str(name)) != name:  # DIR/<stage> must stay a directory of DIR
            raise UserError(f"--preset {path}: stage {name!r}: a stage's name names its directory; use lowercase "
                            "letters, digits, - and _ (at most 48, not starting with -)")
        if not isinstance(entry, dict) or entry.get("command") not in STAGE_COMMANDS or set(entry) - STAGE_KEYS:
            raise UserError(f"--preset {path}: stage {name}: expected a mapping with a command among "
                            f"{', '.join(STAGE_COMMANDS)} and keys among {', '.join(sorted(STAGE_KEYS))}")
        for key, (kind, expected) in STAGE_VALUES.items():
            value = entry.get(key)
            strings = isinstance(value, str) or (isinstance(value, (list, dict))
                                                 and all(isinstance(item, str) for item in value))
            if value is not None and not (isinstance(value, kind) and strings):
                raise UserError(f"--preset {path}: stage {name}: {key}: expected {expected}, got {value!r}")
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


def needed_stages(stage: Stage) -> list[str]:
    """The stages whose output `stage` reads: those its arguments name as `{out}/<stage>/…` (an adapter that train
    writes, say)."""
    texts = [str(item) for value in (stage.args or {}).values()
             for item in (value if isinstance(value, list) else [value])]
    return list(dict.fromkeys(name for text in texts for name in re.findall(r"\{out\}/([^/]+)", text)))


def check_dependencies(stages: Sequence[Stage], out: Path) -> None:
    """Refuse at once (a UserError) when a selected stage reads the output of a stage that is neither selected nor
    done in `out`, naming the stage to add."""
    record, selected = load_record(out), {stage.name for stage in stages}
    for stage in stages:
        missing = [name for name in needed_stages(stage) if name not in selected
                   and record["stages"].get(name, {}).get("status") != "done"]
        if missing:
            raise UserError(f"stage {stage.name} reads the output of {', '.join(missing)}, which has not run in "
                            f"{out}: add {'it' if len(missing) == 1 else 'them'} to --stages (--stages "
                            f"{' '.join([*missing, *(s.name for s in stages)])}) or leave --stages out")


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


def list_stages(stages: Sequence[Stage], settings: dict[str, Any], out: Path, preset: Preset) -> str:
    """Each stage's name, status in `out` and command line."""
    record = load_record(out)
    lines = []
    for stage in stages:
        status = record["stages"].get(stage.name, {}).get("status", "not run")
        lines.append(f"{stage.name} [{status}]: {stage.about}\n    beliefdrift "
                     + shlex.join(redacted(stage_argv(stage, settings, out, preset.stages))))
    return "\n".join(lines)


def run_stages(
    stages: Sequence[Stage], settings: dict[str, Any], out: Path, preset: Preset,
    run_command: Callable[[list[str]], int],
) -> int:
    """Run `stages` of `preset` in order with `run_command(argv)` (an exit status); 0, or the first stage's non-zero
    status (`out/stages.json` says which stage and how to resume)."""
    from beliefdrift.report.html import environment, write_html  # the reports' libraries: only when stages run

    record = load_record(out)
    out.mkdir(parents=True, exist_ok=True)
    record.update(preset=str(preset.path), settings=redacted(settings), environment=environment())
    ran = False  # a report is redone after any stage ran
    for stage in stages:
        argv = stage_argv(stage, settings, out, preset.stages)
        stored = redacted(argv)  # the command line as stages.json keeps it: no key (`credentials.redact`)
        previous = record["stages"].get(stage.name, {})
        if (previous.get("status") == "done" and previous.get("argv") == stored and (out / stage.name).is_dir()
                and not (ran and stage.command == "report")):
            log.info("== %s: done earlier (%.0f s), skipped", stage.name, previous["seconds"])
            continue
        entry: dict[str, Any] = {"command": stage.command, "about": stage.about, "argv": stored,
                                 "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        why = missing_requirement(stage, settings, out, preset.stages)
        if why:
            log.warning("== %s: skipped, %s", stage.name, why)
            record["stages"][stage.name] = {**entry, "status": "skipped", "reason": why, "seconds": 0.0}
            save_record(out, record)
            continue
        log.info("== %s: beliefdrift %s", stage.name, shlex.join(argv))
        # an interrupted or failed attempt with the same command line counts towards the stage's wall time
        earlier = previous.get("seconds", 0.0) if previous.get("argv") == stored and previous.get("status") in (
            "interrupted", "failed") else 0.0
        start, ran = time.perf_counter(), True
        code = run_command(argv)
        status = {0: "done", 130: "interrupted"}.get(code, "failed")
        record["stages"][stage.name] = {**entry, "status": status, "exit_code": code,
                                        "seconds": round(earlier + time.perf_counter() - start, 3)}
        save_record(out, record)
        if code:
            advice = ("run the same command again to resume" if code == 130 else
                      "fix what the error above names, then run the same command again (finished stages are skipped)")
            log.error("beliefdrift paper: stage %s %s (exit %d); %s", stage.name, status, code, advice)
            return code
    for stage in stages:  # also when the report stage was done earlier (`--stages report` alone)
        if stage.command == "report" and record["stages"].get(stage.name, {}).get("status") == "done":
            log.info("wrote %s", write_html(out, record, preset.stages))
            log.info("wrote %s", paper_explorer(out, record, preset.stages, stage))
    return 0


def paper_explorer(out: Path, record: dict[str, Any], stages: Sequence[Stage], report: Stage) -> Path:
    """`out/explorer.html` over every stage directory that finished, with the `report` stage's quality control and
    bootstrap, and the wall times and environment of `record`."""
    from beliefdrift.report.explorer import write_explorer

    known = {field.name for field in dataclasses.fields(ReportOptions)}
    options = ReportOptions(**{key: value for key, value in (report.args or {}).items() if key in known})
    done = [stage.name for stage in stages if record["stages"].get(stage.name, {}).get("status") == "done"
            and stage.command != "report" and (out / stage.name).is_dir()]
    wall = {name: record["stages"][name]["seconds"] for name in done}
    return write_explorer([out / name for name in done], out, options.quality_control, options.bootstrap,
                          record.get("environment"), wall, title="beliefdrift paper: run explorer")
