"""`beliefdrift paper`: stage lists and selection, a tiny end-to-end run (each stage's output equals its command run
alone, a second run skips finished stages), report.html holding every table and figure; the ARC test split."""

from __future__ import annotations

import hashlib
import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from beliefdrift.cli.main import main
from beliefdrift.cli.pipeline import STAGES_FILE, check_dependencies, flags, load_paper_preset, select
from beliefdrift.data.loaders import DataError
from beliefdrift.data.registry import load_dataset
from beliefdrift.files import current_umask
from beliefdrift.report.html import ADAPTER_WEIGHTS, fingerprints
from beliefdrift.runs.store import STORE_FILE, RunStore

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "data"
CPU_STAGES = ["train", "evaluate-csqa", "evaluate-arc", "evaluate-tinymmlu", "drift", "emd-csqa", "reasoning-gsm8k",
              "reasoning-gpqa", "report"]


def test_arc_test_split_reads_its_file(tmp_path: Path) -> None:
    questions = load_dataset("arc", split="test", data_dir=FIXTURES)
    assert [q.id for q in questions] == [f"Fixture_ARC_T{i}" for i in range(1, 6)]
    assert [len(q.labels) for q in questions] == [4, 4, 3, 5, 4]
    assert [q.answer for q in questions] == ["B", "A", "A", "B", "C"]  # T2's digit labels: "1" is A
    with pytest.raises(DataError, match=r"arc_challenge/ARC-Challenge-Test\.jsonl not found"):  # hub off in tests
        load_dataset("arc", split="test", data_dir=tmp_path)


def test_flags_follow_the_commands_conventions() -> None:
    assert flags({"prefix_lengths": [0, 2], "horizon": 10, "skip_long_prompts": True, "adapter": None,
                  "gradient_caching": False}) == ["--prefix-lengths", "0", "2", "--horizon", "10",
                                                  "--skip-long-prompts", "true", "--gradient-caching", "false"]


def test_list_stages_prints_every_command_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "paper"
    assert main(["paper", "--preset", "cpu", "--data-dir", str(FIXTURES), "--list-stages", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    names = [line.split(" [")[0] for line in text.splitlines() if not line.startswith(" ")]
    assert names == CPU_STAGES and text.count("[not run]") == len(CPU_STAGES)
    commands = {name: line.strip() for name, line in zip(names, text.splitlines()[1::2], strict=True)}
    assert commands["evaluate-csqa"].startswith("beliefdrift evaluate --config ")
    assert f"--adapter {out}/train/adapter" in commands["emd-csqa"]
    assert "--methods direct ppr ppr-seed1 ppr-seed5 am-ppr-seed1 am-ppr-seed5 " in commands["evaluate-arc"]
    assert "--prefix-lengths 0 2 " in commands["emd-csqa"] and "--distance l1 kl " in commands["emd-csqa"]
    assert "--n 6 --prefix-lengths 0 2 --epochs 1" in commands["train"]
    assert commands["report"] == f"beliefdrift report --out {out}/report --bootstrap 1000"  # nothing to report yet
    assert not out.exists()

    assert main(["paper", "--preset", "paper", "--model", "my/model", "--list-stages", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "--dataset arc --split test" in text
    assert text.count("--model my/model") == text.count("beliefdrift ") - 1  # every stage but the report


def test_stage_selection_keeps_the_preset_order(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    args = ["paper", "--preset", "cpu", "--list-stages", "--out", str(tmp_path)]
    assert main([*args, "--stages", "report", "drift", "evaluate-csqa"]) == 0
    printed = [line.split(" [")[0] for line in capsys.readouterr().out.splitlines() if not line.startswith(" ")]
    assert printed == ["evaluate-csqa", "drift", "report"]
    assert main([*args, "--stages", "drift", "emd"]) == 2
    assert "unknown stages ['emd']" in capsys.readouterr().err


class Page(HTMLParser):
    """The result tables (caption, rows), embedded figures and any external reference of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict] = []
        self.figures: list[tuple[str, str]] = []
        self.external: list[str] = []
        self.stage_rows: list[list[str]] = []
        self.captions: dict[str, str] = {}  # the first figure caption per stage
        self._caption: list[str] | None = None
        self._cells: list[str] | None = None
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if tag == "table":
            self._in = (attr.get("class") or "").split(" ")[0]  # "result", or "result wide"
            if self._in == "result":
                self.tables.append({"stage": attr["data-stage"], "caption": "", "rows": 0})
        elif tag == "caption" or (tag == "tr" and self._in in ("result", "stages")):
            self._cells = []
        elif tag == "figure":
            self.figures.append((attr["data-stage"], attr["data-file"]))
        elif tag == "figcaption":
            self._caption = []
        elif tag == "img":
            assert attr["src"].startswith("data:image/png;base64,")
        for key in ("src", "href"):
            if attr.get(key) and not attr[key].startswith(("data:", "#")) and attr[key] != "explorer.html":
                self.external.append(attr[key])

    def handle_data(self, data: str) -> None:
        if self._caption is not None:
            self._caption.append(data)
        if self._cells is not None and data.strip():
            self._cells.append(data.strip())

    def handle_endtag(self, tag: str) -> None:
        if tag == "figcaption":
            self.captions.setdefault(self.figures[-1][0], "".join(self._caption).strip())
            self._caption = None
        elif tag == "caption":
            self.tables[-1]["caption"] = " ".join(self._cells)
            self._cells = None
        elif tag == "tr" and self._cells is not None:
            if self._in == "result":
                self.tables[-1]["rows"] += 1
            else:
                self.stage_rows.append(self._cells)
            self._cells = None
        elif tag == "table":
            self._in = None


def markdown_table_count(path: Path) -> int:
    return sum(line.startswith("|---") for line in path.read_text().splitlines())


@pytest.fixture
def tiny_preset(tmp_path: Path, history_template: str) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(f"""
settings: {{dtype: float32, seed: 3}}
stages:
  evaluate-demo:
    command: evaluate
    args: {{dataset: demo, n: 2, paths: 2, steps: 3, methods: [direct, ppr, ppr-seed1], qc_path_mass: 0.0,
            bootstrap: 20, template: {history_template}}}
  drift:
    command: drift
    args: {{dataset: demo, n: 1, paths: 2, steps: 3, methods: [ppr, ppr-seed1], template: {history_template}}}
  reasoning-gpqa:
    command: reasoning
    requires: [gpqa/no_such_file.csv]
    args: {{dataset: gpqa}}
  report:
    command: report
    runs: [evaluate-demo]
    args: {{bootstrap: 20, qc_path_mass: 0.0}}
""")
    return path


def test_paper_runs_stages_as_their_commands_and_resumes(
    tiny_model_dir: Path, tiny_preset: Path, history_template: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "paper"
    paper = ["paper", "--preset", str(tiny_preset), "--model", str(tiny_model_dir), "--data-dir", str(FIXTURES),
             "--out", str(out)]
    assert main(paper) == 0
    record = json.loads((out / STAGES_FILE).read_text())
    assert {name: entry["status"] for name, entry in record["stages"].items()} == {
        "evaluate-demo": "done", "drift": "done", "reasoning-gpqa": "skipped", "report": "done"}
    assert all(entry["seconds"] > 0 for name, entry in record["stages"].items() if name != "reasoning-gpqa")

    # Each stage's output is its command's, run alone with the same settings.
    alone = tmp_path / "alone"
    common = ["--model", str(tiny_model_dir), "--dtype", "float32", "--seed", "3", "--data-dir", str(FIXTURES),
              "--template", history_template, "--dataset", "demo", "--n"]
    assert main(["evaluate", *common, "2", "-J", "2", "-N", "3", "--methods", "direct", "ppr", "ppr-seed1",
                 "--qc-path-mass", "0", "--bootstrap", "20", "--out", str(alone / "evaluate")]) == 0
    assert main(["drift", *common, "1", "-J", "2", "-N", "3", "--methods", "ppr", "ppr-seed1",
                 "--out", str(alone / "drift")]) == 0
    with RunStore.open(out / "evaluate-demo" / STORE_FILE, read_only=True) as staged, \
            RunStore.open(alone / "evaluate" / STORE_FILE, read_only=True) as single:
        assert staged.config() == single.config()
        pairs = list(zip(staged.rows(), single.rows(), strict=True))
        assert len(pairs) == 6 and all(np.array_equal(a.probs, b.probs) for a, b in pairs)
    assert (out / "evaluate-demo" / "tables.md").read_text() == (alone / "evaluate" / "tables.md").read_text()
    assert (out / "report" / "tables.md").read_text() == (alone / "evaluate" / "tables.md").read_text()
    with RunStore.open(out / "drift" / STORE_FILE, read_only=True) as staged, \
            RunStore.open(alone / "drift" / STORE_FILE, read_only=True) as single:
        assert staged.config() == single.config()
        assert [staged.records(*unit) for unit in staged.record_units()] == [
            single.records(*unit) for unit in single.record_units()]

    # report.html: every Markdown table and every figure the stages wrote, nothing fetched from outside.
    page = Page()
    page.feed((out / "report.html").read_text())
    # (one benchmark: evaluate-demo's tables and diagrams are the report's, shown once)
    expected_tables = {stage: sum(markdown_table_count(out / stage / name) for name in names
                                  if (out / stage / name).is_file())
                       for stage, names in (("report", ("tables.md", "paired.md")), ("evaluate-demo", ()),
                                            ("drift", ("summary.md",)))}
    assert markdown_table_count(out / "report" / "paired.md") >= 1  # the paired comparisons reach the page too
    assert {stage: sum(t["stage"] == stage for t in page.tables) for stage in expected_tables} == expected_tables
    assert [t["caption"][:8] for t in page.tables if t["stage"] == "report"][:2] == ["Table 1.", "Table 2."]
    assert all(t["rows"] == 4 for t in page.tables if t["stage"] == "report"
               and t["caption"].startswith("Table"))  # header + three methods
    figures = {(stage, path.name) for stage in ("report", "drift") for path in (out / stage).glob("*.png")}
    assert len(figures) >= 5 and set(page.figures) == figures
    assert page.captions["report"].startswith("Reliability diagram") and "Figure 1" in page.captions["drift"]
    assert page.external == []
    assert [row[:3] for row in page.stage_rows[1:]] == [["evaluate-demo", "evaluate", "done"],
                                                         ["drift", "drift", "done"],
                                                         ["reasoning-gpqa", "reasoning", "skipped"],
                                                         ["report", "report", "done"]]
    html = (out / "report.html").read_text()
    with RunStore.open(out / "evaluate-demo" / STORE_FILE, read_only=True) as staged:
        assert staged.config()["questions_sha256"] in html
    for library in ("torch", "transformers", "peft", "beliefdrift"):
        assert f"<th>{library}</th>" in html

    # A second run skips every finished stage and leaves their records as they were (a skipped stage is checked
    # again: its file may have appeared).
    capsys.readouterr()
    assert main(paper) == 0
    assert capsys.readouterr().err.count("done earlier") == 3
    again = json.loads((out / STAGES_FILE).read_text())["stages"]
    assert again.pop("reasoning-gpqa")["status"] == "skipped"
    assert again == {name: entry for name, entry in record["stages"].items() if name != "reasoning-gpqa"}

    # `--stages report` alone (done earlier) writes the pages again; every output file honours the umask
    (out / "report.html").unlink()
    assert main([*paper, "--stages", "report"]) == 0
    mode = 0o666 & ~current_umask()
    for path in (out / "report.html", out / "explorer.html", out / STAGES_FILE, out / "report" / "paired.md",
                 out / "drift" / "records.csv"):
        assert path.stat().st_mode & 0o777 == mode, path


def test_a_failed_stage_stops_the_run(tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture) -> None:
    preset = tmp_path / "bad.yaml"
    preset.write_text("stages:\n  evaluate-x:\n    command: evaluate\n    args: {dataset: no-such-set}\n"
                      "  report:\n    command: report\n    runs: [evaluate-x]\n")
    out = tmp_path / "paper"
    assert main(["paper", "--preset", str(preset), "--model", str(tiny_model_dir), "--out", str(out)]) == 2
    stages = json.loads((out / STAGES_FILE).read_text())["stages"]
    assert list(stages) == ["evaluate-x"] and stages["evaluate-x"]["status"] == "failed"
    err = capsys.readouterr().err
    assert "stage evaluate-x failed" in err and "fix what the error above names" in err and "to resume" not in err
    preset.write_text("stages:\n  evaluate-x:\n    command: evaluatee\n")
    assert main(["paper", "--preset", str(preset), "--list-stages", "--out", str(out)]) == 2



def test_stage_dependencies_are_checked_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    preset = tmp_path / "deps.yaml"
    preset.write_text("stages:\n  train:\n    command: train\n  drift:\n    command: drift\n  emd-x:\n"
                      "    command: emd\n    args: {adapter: '{out}/train/adapter', methods: [am-ppr-seed1]}\n")
    out = tmp_path / "paper"
    assert main(["paper", "--preset", str(preset), "--stages", "drift", "emd-x", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "stage emd-x reads the output of train" in err and "--stages train drift emd-x" in err
    assert not out.exists()  # refused before any stage ran
    out.mkdir()
    (out / STAGES_FILE).write_text(json.dumps({"stages": {"train": {"status": "done"}}}))
    check_dependencies(select(load_paper_preset(str(preset)), ["emd-x"]), out)  # train is done: emd-x may run


def test_fingerprints_name_model_data_and_adapter_weights(tmp_path: Path) -> None:
    (tmp_path / "train" / "adapter").mkdir(parents=True)
    (tmp_path / "train" / "adapter" / ADAPTER_WEIGHTS).write_bytes(b"lora")
    digest = hashlib.sha256(b"lora").hexdigest()[:16]
    assert fingerprints(tmp_path / "train", {"model": "m", "lora_r": 16}) == {"model": "m",
                                                                               "adapter_weights_sha256": digest}
    adapter = str(tmp_path / "train" / "adapter")
    evaluated = {"model": "m", "adapter": adapter, "questions_sha256": "ab", "seed": 0}
    expected = {"model": "m", "adapter": adapter, "questions_sha256": "ab", "adapter_weights_sha256": digest}
    assert fingerprints(tmp_path / "evaluate", evaluated) == expected
