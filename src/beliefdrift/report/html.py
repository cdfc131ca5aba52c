"""`DIR/report.html` of `beliefdrift paper`: one self-contained page (figures embedded as base64 PNG, no external
resources) rendered from templates/report.html.j2.

Every table is read from the Markdown the stages wrote (report's tables.md, drift's and emd's summary.md, the
reasoning summary through `summary_markdown`), so the page shows the same numbers as the files beside it; every PNG
in a stage's directory is embedded. Per stage: the command line, status, wall time and the resolved settings its
run store (or train's config.yaml) holds; then the model and data fingerprints and the environment.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
import yaml
from jinja2 import Environment, PackageLoader, select_autoescape

from beliefdrift.files import write_atomic
from beliefdrift.runs.reasoning import summary_markdown
from beliefdrift.runs.store import STORE_FILE, RunStore

HTML_FILE = "report.html"
LIBRARIES = ("beliefdrift", "torch", "transformers", "peft", "accelerate", "numpy", "jinja2")
#: Run-identity keys shown as fingerprints (what the results were computed from).
FINGERPRINT_KEYS = ("model", "adapter", "dataset", "split", "questions", "questions_sha256", "template_sha256",
                    "dtype", "device")
ADAPTER_WEIGHTS = "adapter_model.safetensors"
#: (file name prefix, caption) of the figures the stages write, most specific prefix first: which of the paper's
#: figures each one is and how to read it.
FIGURE_CAPTIONS = (
    ("reliability-", "Reliability diagram (the calibration behind Table 2): accuracy per confidence bin against the "
                     "diagonal of a calibrated method; the red gap is what ECE averages."),
    ("marginal_drift_", "Figure 1 for one question: E[θ_n] of each option against n, one panel per method; a "
                        "martingale keeps every curve flat."),
    ("marginal_drift", "Figure 1 averaged over questions: E[θ_n] of the options ranked by E[θ_0], per method; "
                       "flat curves mean no drift."),
    ("marginal_shift", "Figure 1's drift in one number: ‖E[θ_n] − E[θ_0]‖₁ against n (mean ± std over questions), "
                       "zero for a martingale."),
    ("emd_bar_", "Figure 3 (left): EMD‾ per method (±1 std over questions) with its noise floor; lower is closer to "
                 "a martingale."),
    ("emd_k_b_", "Figure 3 (right): EMD_k(b) against the burn-in b with the noise floor's band; how the drift left "
                 "after b sampled answers falls."),
    ("centroid_drift", "Chain-of-thought appendix: cosine between the embedding centroids of pairs n and n + τ; "
                       "a curve near 1 means the reasoning does not drift."),
)


class StageSpec(Protocol):
    """What the page reads of a `paper` stage (`cli.pipeline.Stage`)."""

    @property
    def name(self) -> str: ...
    @property
    def command(self) -> str: ...


@dataclass(frozen=True)
class Table:
    """A Markdown table: the line before it (its caption), header cells and rows of cells."""

    caption: str
    header: list[str]
    rows: list[list[str]]


@dataclass
class Section:
    """What the page shows of one stage."""

    name: str
    command: str
    record: Mapping[str, Any]
    tables: list[Table] = field(default_factory=list)
    figures: list[tuple[str, str, str]] = field(default_factory=list)  # (file name, caption, base64 PNG)
    settings: str = ""
    fingerprints: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def figure_caption(name: str) -> str:
    """The caption of a figure file written by a stage (its paper figure, one sentence on reading it)."""
    return next((caption for prefix, caption in FIGURE_CAPTIONS if name.startswith(prefix)), "")


def environment() -> dict[str, Any]:
    """Library versions and the device the process runs on."""
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    cuda = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {"python": platform.python_version(), "libraries": versions, "platform": platform.platform(),
            "processor": _cpu_name(), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "cuda": cuda}


def _cpu_name() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                platform.processor())


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def tables_in_markdown(text: str) -> list[Table]:
    """The tables of a Markdown text (a `| … |` header line, a `|---|` rule, `| … |` rows), each captioned by the
    non-blank line before it (bold markers dropped)."""
    lines, tables, caption, i = text.splitlines(), [], "", 0
    while i < len(lines):
        line = lines[i].strip()
        rule = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if line.startswith("|") and rule.startswith("|") and set(rule) <= set("|-: "):
            rows, i = [], i + 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            tables.append(Table(caption.replace("**", ""), _cells(line), rows))
            caption = ""
            continue
        caption = line or caption
        i += 1
    return tables


def stage_tables(directory: Path, command: str) -> list[Table]:
    """The tables a stage wrote: tables.md and the paired comparisons paired.md (evaluate, report), summary.md
    (drift, emd), the reasoning summary."""
    if command == "reasoning":
        path = directory / "summary.json"
        return tables_in_markdown(summary_markdown(json.loads(path.read_text()))) if path.is_file() else []
    names = ("tables.md", "paired.md") if (directory / "tables.md").is_file() else ("summary.md",)
    return [table for name in names if (directory / name).is_file()
            for table in tables_in_markdown((directory / name).read_text())]


def resolved_settings(directory: Path, command: str) -> dict[str, Any]:
    """The settings a stage ran with: its run store's identity, or train's config.yaml."""
    if command == "train":
        path = directory / "config.yaml"
        return yaml.safe_load(path.read_text()) if path.is_file() else {}
    store = directory / STORE_FILE
    if not store.is_file():
        return {}
    with RunStore.open(store, read_only=True) as opened:
        return opened.config()


def fingerprints(directory: Path, settings: Mapping[str, Any]) -> dict[str, Any]:
    """Identity keys naming the model and data, plus the sha256 of a trained adapter's weights."""
    shown = {key: settings[key] for key in FINGERPRINT_KEYS if settings.get(key) is not None}
    adapters = [directory / "adapter", *([Path(settings["adapter"])] if settings.get("adapter") else [])]
    for weights in (adapter / ADAPTER_WEIGHTS for adapter in adapters):
        if weights.is_file():
            shown["adapter_weights_sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()[:16]
            break
    return shown


def section(out: Path, stage: StageSpec, record: Mapping[str, Any], reported_by: str = "") -> Section:
    """What the page shows of one stage; an evaluate stage `reported_by` the report stage of one benchmark shows its
    settings only (its tables and reliability diagrams are the report's)."""
    directory = out / stage.name
    settings = resolved_settings(directory, stage.command)
    figures = [(path.name, figure_caption(path.name), base64.b64encode(path.read_bytes()).decode())
               for path in sorted(directory.glob("*.png"))]
    tables = stage_tables(directory, stage.command)
    note = ""
    if reported_by:
        tables, figures = [], []
        note = f"Its tables and reliability diagrams are those shown under {reported_by} above."
    return Section(stage.name, stage.command, record, tables, figures,
                   yaml.safe_dump(settings, sort_keys=False, allow_unicode=True) if settings else "",
                   fingerprints(directory, settings), note)


def render(out: Path, record: Mapping[str, Any], stages: Sequence[StageSpec]) -> str:
    """The page for the run in `out` (`record`: stages.json) over the stages that have a record."""
    done = [stage for stage in stages if stage.name in record["stages"]]
    ordered = [s for s in done if s.command == "report"] + [s for s in done if s.command != "report"]
    reported = {}  # a report of one benchmark: its tables are that evaluate stage's
    for report in (s for s in done if s.command == "report" and record["stages"][s.name].get("status") == "done"):
        runs = [name for name in getattr(report, "runs", ()) if (out / name / STORE_FILE).is_file()]
        if len(runs) == 1:
            reported[runs[0]] = report.name
    sections = [section(out, stage, record["stages"][stage.name], reported.get(stage.name, ""))
                for stage in ordered]
    templates = Environment(loader=PackageLoader("beliefdrift.report", "templates"),
                            autoescape=select_autoescape(["html", "j2"]), trim_blocks=True, lstrip_blocks=True)
    total = sum(entry.get("seconds", 0.0) for entry in record["stages"].values())
    return templates.get_template("report.html.j2").render(
        record=record, sections=sections, stages=[(s.name, record["stages"][s.name]) for s in done], total=total)


def write_html(out: Path, record: Mapping[str, Any], stages: Sequence[StageSpec]) -> Path:
    """Render and write `out/report.html` atomically."""
    path = out / HTML_FILE
    write_atomic(path, render(out, record, stages))
    return path
