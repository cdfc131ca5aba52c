"""The docs' worked examples run as their pages write them, at a small size, and fill their tables: the lm-eval task
file of docs/lm-eval.md, the paired comparison of docs/tutorials/compare-methods.md and the AM-PPR adapter of
docs/tutorials/am-ppr.md, each on the default model.

A page marks what the test runs. `<!-- docs-test: {"-n 100": "-n 3 -J 2"} -->` above a shell block: its
`beliefdrift …` lines run in order (in one scratch directory) with those replacements (each must occur in the block);
`<!-- docs-test-file: NAME {"old": "new"} -->` above any block: the block is saved as NAME first (`{data}` in a
replacement is the benchmark data directory). The sizes keep -N at 20 where an evaluation reads it (quality control
reads the label mass over the N answers; at N = 5 the default model's first two answers, ~8% on the labels, drop
unseeded PPR); the AM-PPR training is 2 updates at learning rate 3e-3 and format weight 1, where the page's preset
takes 80 at 2e-4 and 0.25 (both lift the first answer's label mass, which AM-PPR + NoSEED reads, above quality
control's 0.5). Measured on a shared 2-core machine (load 7–9): 95 s of CPU for the AM-PPR page, less for the others.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from table_checks import table_problems

from beliefdrift.cli.main import main
from beliefdrift.report.tables import MISSING
from beliefdrift.runs.results import open_run

ROOT = Path(__file__).resolve().parents[1]
MARKED = re.compile(r"^<!-- docs-test(?:-file: (?P<name>\S+) |: )(?P<tiny>\{[^\n]*\}) -->\n```\w*\n(?P<body>.*?)^```$",
                    re.MULTILINE | re.DOTALL)
PAGES = ["docs/lm-eval.md", "docs/tutorials/compare-methods.md", "docs/tutorials/am-ppr.md"]


def marked_steps(page: str, data: Path) -> list[tuple[str, object]]:
    """("file", (name, text)) and ("run", argv) in page order, the replacements applied."""
    steps: list[tuple[str, object]] = []
    for match in MARKED.finditer((ROOT / page).read_text()):
        body = match["body"]
        for old, new in json.loads(match["tiny"]).items():
            assert old in body, f"{page}: the docs-test replacement {old!r} is not in its block"
            body = body.replace(old, new.replace("{data}", str(data)))
        if match["name"]:
            steps.append(("file", (match["name"], body)))
            continue
        for line in body.replace("\\\n", " ").splitlines():
            if line.startswith("beliefdrift "):
                steps.append(("run", shlex.split(line, comments=True)[1:]))
    return steps


def assert_filled(argv: list[str], cwd: Path) -> None:
    """An evaluate or report run: every method scored (quality control left none without a question), every
    comparison over shared questions, no empty cell in Tables 1 and 2; a diagnostic: a summary of every method.
    Every table titled and at most 100 columns wide."""
    command = argv[0]
    out = cwd / (argv[argv.index("--out") + 1] if "--out" in argv else argv[1])
    if command in ("evaluate", "report"):
        run = open_run(out)
        assert run.quality_control().all_excluded == [], f"{argv}: quality control dropped a whole method"
        assert all(pair.n > 0 for pair in run.paired(n_resamples=20))
        tables = (out / "tables.md").read_text()
        assert not [line for line in tables.splitlines() if line.startswith("| ") and f"| {MISSING} |" in line]
        assert table_problems(tables + "\n\n" + (out / "paired.md").read_text()) == []
    elif command in ("emd", "drift"):
        given = argv[argv.index("--methods") + 1 :] if "--methods" in argv else []
        methods = given[: next((i for i, arg in enumerate(given) if arg.startswith("-")), len(given))]
        summary = json.loads((out / "summary.json").read_text())
        assert set(methods) <= set(summary) and summary, f"{argv}: methods missing from summary.json"
        assert table_problems((out / "summary.md").read_text()) == []
    elif command == "train":
        assert (out / "adapter").is_dir()


@pytest.mark.integration
@pytest.mark.parametrize("page", PAGES)
def test_a_worked_example_fills_its_tables(page: str, data_dir: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    if page == "docs/lm-eval.md":
        pytest.importorskip("lm_eval.tasks", reason="lm_eval is not installed: pip install 'beliefdrift[lm-eval]'")
    monkeypatch.setenv("BELIEFDRIFT_DATA", str(data_dir))
    monkeypatch.chdir(tmp_path)
    steps = marked_steps(page, data_dir)
    assert any(kind == "run" for kind, _ in steps), f"{page} marks no command to run"
    for kind, step in steps:
        if kind == "file":
            name, text = step
            (tmp_path / name).write_text(text)
            continue
        assert main(["--quiet", *step]) == 0, step
        assert_filled(step, tmp_path)
