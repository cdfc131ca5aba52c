"""The run explorer (`report --html`): the page's data against the run store, escaping of question texts, the
script's lint, and the page driven in headless Chromium at 1366 px (`tests/browser.py`; skipped where Chromium is
missing): it loads with no console error, the question browser filters, a clicked question's plotted paths are the
store's θ (AM-PPR's single θ̂_1 per path as points), and issue 39's drawing: labels inside their plots, one name per
method, whole-number count axes, questions per reliability bin, no whisker without a valid interval, CE2 beside ECE,
captions that say what is drawn, quality control's exclusions marked, a layout that fills the width."""

from __future__ import annotations

import base64
import csv
import fnmatch
import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from browser import console_errors, wait_for

from beliefdrift.cli.main import main
from beliefdrift.data.question import QUESTIONS_FILE
from beliefdrift.metrics.functional import REPORT_METRICS, PairedDelta
from beliefdrift.report.compare import compare_runs
from beliefdrift.report.explorer import (
    QUANT,
    SIDECAR_DIR,
    explorer_data,
    explorer_script,
    plotly_js,
    script_json,
    write_explorer,
)
from beliefdrift.report.paired import delta_cell, p_cell
from beliefdrift.report.tables import format_cell, format_value
from beliefdrift.report.text import fixed
from beliefdrift.runs.scoring import SCORE_METRICS, QualityControl
from beliefdrift.runs.store import STORE_FILE, RunStore

pytest.importorskip("plotly", reason="the explorer embeds plotly.js from the plotly package")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "src" / "beliefdrift" / "report" / "templates" / "explorer.js"
ESLINT = ROOT / ".ci" / "eslint"
#: A question whose stem and options are markup and script: the page must show them as text.
HOSTILE_STEM = 'Which tag is this? </script><script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
HOSTILE = [
    {"id": "x-001", "answerKey": "A", "question": {"stem": HOSTILE_STEM, "choices": [
        {"label": "A", "text": "<b>bold</b>"}, {"label": "B", "text": "&amp; an entity"},
        {"label": "C", "text": "plain"}]}},
    {"id": "x-002", "answerKey": "C", "question": {"stem": "What colour is the sky? <!-- not a comment -->",
                                                   "choices": [{"label": "A", "text": "green"},
                                                               {"label": "B", "text": "red"},
                                                               {"label": "C", "text": "blue"}]}},
]
METHODS = ("direct", "ppr", "ppr-seed1", "am-ppr")
TITLES = {"direct": "Direct-Query", "ppr": "PPR + NoSEED", "ppr-seed1": "PPR + SEED_1", "am-ppr": "AM-PPR + NoSEED"}
#: A stored method name shown where its title belongs (names are lower case, titles are not).
RAW_NAME = re.compile(r"(?<![\w-])(am-ppr|ppr-seed1|ppr|direct)(?![\w-])")


def nulled_bounds(page: Path, metric: str) -> None:
    """Rewrite `page` as the metrics layer writes a metric without a valid interval (issue 39 §1: ECE at every n):
    its bounds, and its paired p, null in the method table and in every paired Δ."""
    text = page.read_text()
    data = page_data(page)
    for run in data["runs"]:
        for row in run.get("table", ()):
            if row.get(metric):
                row[metric][1:] = [None, None]
        for pair in run.get("paired", ()):
            if metric in pair["deltas"]:
                pair["deltas"][metric][1:] = [None, None, None]
    old = re.search(r'(<script type="application/json" id="explorer-data">)(.*?)(</script>)', text, re.S)
    page.write_text(text[:old.start(2)] + script_json(data) + text[old.end(2):])


@pytest.fixture(scope="module")
def explorer(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A tiny evaluate run on the hostile questions (tiny model; AM-PPR on a random LoRA adapter), a drift run and
    two emd runs (Monte Carlo with its urn floor, exact without one) on one of them, and the explorer page over
    them (quality control off: `report/`), and the page of the evaluate run under the default quality control
    (`report-qc/`: the tiny model's label mass is far below 0.5, so every question is excluded)."""
    from peft import LoraConfig, get_peft_model

    from beliefdrift.backend import load_model

    root = tmp_path_factory.mktemp("explorer")
    data = root / "hostile.jsonl"
    data.write_text("".join(json.dumps(record) + "\n" for record in HOSTILE))
    template = root / "short.txt"
    template.write_text("{question}\nAnswers ({choice_str}), one per line:\n")
    lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    get_peft_model(load_model(str(tiny_model_dir), dtype="float32").model, lora).save_pretrained(root / "adapter")
    common = ["--model", str(tiny_model_dir), "--dtype", "float32", "--seed", "3", "--dataset", str(data),
              "--template", str(template)]
    assert main(["evaluate", *common, "-J", "3", "-N", "4", "--methods", *METHODS, "--adapter", str(root / "adapter"),
                 "--qc-path-mass", "0", "--bootstrap", "20", "--out", str(root / "evaluate")]) == 0
    assert main(["drift", *common, "--n", "1", "-J", "2", "-N", "3", "--methods", "ppr",
                 "--out", str(root / "drift")]) == 0
    for name, budget in (("emd", "0"), ("emd-exact", "4096")):  # Monte Carlo k-step predictives, and exact ones
        assert main(["emd", *common, "--n", "1", "-J", "2", "-N", "3", "--horizon", "4", "--lookahead", "3",
                     "--burn-in", "3", "--methods", "ppr", "--noise-floor-replicates", "20", "--exact-budget", budget,
                     "--out", str(root / name)]) == 0
    # train's log.csv and the reasoning summary as those commands write them (their runs take minutes)
    (root / "train").mkdir()
    (root / "train" / "log.csv").write_text("step,epoch,loss,sc,anchor,format,val_emd_l1\n1,0,2.5,1.5,0.5,0.5,\n"
                                            "2,0,2.0,1.2,0.4,0.4,0.3\n")
    (root / "reasoning").mkdir()
    (root / "reasoning" / "summary.json").write_text(json.dumps({"command": "reasoning", "tau": 1, "min_parsed": 0.5,
                                                                 "conditions": {
        "plain": {"title": "no seeds", "curve_mean": [1.0, 0.8, None], "curve_std": [0.0, 0.1, None], "pairs": 48,
                  "valid_answers": 2, "unparsed_answers": 46, "malformed": 1, "few_parsed": True,
                  "majority_accuracy": {"overall": 0.0}}}}))
    runs = ("evaluate", "drift", "emd", "emd-exact", "train", "reasoning")
    assert main(["report", *(str(root / name) for name in runs), "--html",
                 "--bootstrap", "20", "--qc-path-mass", "0", "--out", str(root / "report")]) == 0
    nulled_bounds(root / "report" / "explorer.html", "ECE")
    write_explorer([root / "evaluate"], root / "report-qc", QualityControl(), n_resamples=20)
    # issue 48 §1: the same questions and methods again in bfloat16, reported beside the float32 run
    bf16 = [value if value != "float32" else "bfloat16" for value in common]
    assert main(["evaluate", *bf16, "-J", "3", "-N", "4", "--methods", *METHODS, "--adapter", str(root / "adapter"),
                 "--qc-path-mass", "0", "--bootstrap", "20", "--out", str(root / "evaluate-bf16")]) == 0
    assert main(["report", str(root / "evaluate"), str(root / "evaluate-bf16"), "--html", "--bootstrap", "20",
                 "--qc-path-mass", "0", "--out", str(root / "compare")]) == 0
    return root


def page_data(page: Path) -> dict:
    match = re.search(r'<script type="application/json" id="explorer-data">(.*?)</script>', page.read_text(), re.S)
    assert match
    return json.loads(match.group(1))


def sidecar_theta(path: Path) -> dict[str, np.ndarray]:
    """{method: θ [J, N+1, K]} of one sidecar script file, decoded as the page decodes it."""
    match = re.fullmatch(r'explorerPaths\((".*?"),(.*)\);\n', path.read_text(), re.S)
    assert match
    methods = json.loads(match.group(2))
    return {method: np.frombuffer(base64.b64decode(entry["theta"]), "<u2").reshape(entry["shape"]) / QUANT
            for method, entry in methods.items()}


def test_the_page_holds_the_runs_and_the_stores_paths(explorer: Path) -> None:
    page = explorer / "report" / "explorer.html"
    data = page_data(page)
    assert [(run["name"], run["command"]) for run in data["runs"]] == [
        ("evaluate", "evaluate"), ("drift", "drift"), ("emd", "emd"), ("emd-exact", "emd"), ("train", "train"),
        ("reasoning", "reasoning")]
    evaluate, drift, *_ = data["runs"]
    train = data["runs"][4]
    assert train["log"]["loss"] == [2.5, 2.0] and train["log"]["val_emd_l1"] == [None, 0.3]
    assert "torch" in data["environment"]["libraries"]
    assert {row["name"] for row in evaluate["table"]} == set(METHODS)
    assert data["titles"] == TITLES  # the registry's Method.title of every method on the page
    assert [m["name"] for m in data["metrics"]] == ["ACC", "AUC", "ECE", "CE2", "NLL", "BS"]  # the tables' columns
    questions = {q["id"]: q for q in evaluate["questions"]}
    assert questions["x-001"]["stem"] == HOSTILE_STEM and questions["x-001"]["options"][0] == "<b>bold</b>"
    assert set(drift["questions"][0]["methods"]["ppr"]) == {"marginal_mean", "marginal_shift", "cid_l1"}
    with RunStore.open(explorer / "evaluate" / STORE_FILE, read_only=True) as store:
        rows = [row for row in store.rows() if row.thetas is not None]
    for row in rows:
        theta = sidecar_theta(page.parent / questions[row.question_id]["paths"])[row.method]
        np.testing.assert_allclose(theta, row.thetas, atol=0.5 / QUANT + 1e-7)
    # nothing from outside (plotly.js aside, whose strings name its web site), the script inlined (one file), and
    # no question text as markup: `<` only reaches the page escaped
    text = page.read_text()
    own = text.replace(plotly_js(), "")
    assert len(own) < len(text) and not re.search(r'(src|href)="(https?:)?//', own)
    assert explorer_script() in text and "explorer.js" not in own.replace(explorer_script(), "")
    assert "<script>window.pwned" not in text and "<b>bold" not in text
    assert len(list((page.parent / SIDECAR_DIR).glob("*.js"))) == len(questions)


def test_script_json_cannot_close_a_script() -> None:
    text = script_json({"a": "</script><!--", "b": float("nan"), "c": np.float32(0.1234567)})
    assert "<" not in text and json.loads(text) == {"a": "</script><!--", "b": None, "c": float(np.float32(0.1234567))}


def test_the_script_is_package_data() -> None:
    """Every file the page is rendered from ships in the wheel (pyproject's package-data)."""
    tomllib = pytest.importorskip("tomllib")
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["beliefdrift"]
    templates = SCRIPT.parent
    shipped = [path.name for path in templates.iterdir() if path.is_file() and any(
        fnmatch.fnmatch(str(path.relative_to(ROOT / "src" / "beliefdrift")), pattern) for pattern in patterns)]
    assert sorted(shipped) == sorted(path.name for path in templates.iterdir() if path.is_file())


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to parse the script")
def test_the_script_parses() -> None:
    result = subprocess.run(["node", "--check", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(not (ESLINT / "node_modules" / ".bin" / "eslint").is_file(),
                    reason="ESLint is not installed: npm ci --prefix .ci/eslint (.ci/run does)")
def test_the_script_passes_eslint() -> None:
    result = subprocess.run([str(ESLINT / "node_modules" / ".bin" / "eslint"), "--config",
                             str(ESLINT / "eslint.config.mjs"), str(SCRIPT)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


#: Whether the browser shows a loaded explorer page (its data script is there): a page whose load failed or was cut
#: short can keep the URL it was asked for.
LOADED = ("return document.readyState === 'complete' && document.getElementById('explorer-data') !== null "
          "&& document.getElementById('question-table') !== null")


def opened(browser, page: Path):  # noqa: ANN001, ANN201
    """The session's browser showing `page`, loaded (no console error, its question table and plots drawn) unless it
    shows it already: the tests below share one browser, each leaving the filters of a page as it found them."""
    if browser.current_url != page.as_uri() or not browser.execute_script(LOADED):
        console_errors(browser)  # a page before this one is not this page's fault
        browser.get(page.as_uri())
        wait_for(browser, "return document.querySelectorAll('#question-table tr.pick').length > 0")
        wait_for(browser, FITTED)
        assert console_errors(browser) == []
    return browser


@pytest.fixture
def page(explorer: Path, browser):  # noqa: ANN001, ANN201
    """The page over every run."""
    return opened(browser, explorer / "report" / "explorer.html")


@pytest.fixture
def compared(explorer: Path, browser):  # noqa: ANN001, ANN201
    """The page over the float32 and the bfloat16 evaluate runs of the same questions and methods."""
    return opened(browser, explorer / "compare" / "explorer.html")


#: Every plot laid out at its box's width (a plot a grid narrows is laid out again after a short delay).
FITTED = ("return [...document.querySelectorAll('.js-plotly-plot')].every("
          "div => Math.abs(div._fullLayout.width - div.clientWidth) <= 1)")


def visible_rows(driver) -> list[list[str]]:  # noqa: ANN001
    return driver.execute_script("return [...document.querySelectorAll('#question-table tr.pick')].map("
                                 "tr => [...tr.children].map(td => td.textContent))")


def set_filter(driver, element: str, value: str) -> None:  # noqa: ANN001
    driver.execute_script("const s = document.getElementById(arguments[0]); s.value = arguments[1];"
                          "s.dispatchEvent(new Event('input'))", element, value)


def all_rows(driver) -> list[list[str]]:  # noqa: ANN001
    """The question table with every filter cleared."""
    for element in ("f-search", "f-run", "f-dataset", "f-method", "f-correct", "f-qc", "f-drift"):
        set_filter(driver, element, "")
    return visible_rows(driver)


def plots(driver, selector: str = ".js-plotly-plot") -> list[dict]:  # noqa: ANN001
    """Each plot: its box, title, axis titles, traces (name, kind, mode, x, y), and the boxes and texts of its tick
    labels and titles."""
    return driver.execute_script("""
      const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
      return [...document.querySelectorAll(arguments[0])].map(div => ({
        box: box(div), section: div.closest('section').id, title: div.layout.title.text,
        x_title: ((div.layout.xaxis || {}).title || {}).text || '', x_range: div._fullLayout.xaxis.range,
        traces: div.data.map(t => ({name: t.name, kind: (t.meta || {}).kind, mode: t.mode, x: t.x, y: t.y,
                                    error: !!t.error_x, text: t.text})),
        x_ticks: [...div.querySelectorAll('.xtick text')].map(e => e.textContent),
        labels: [...div.querySelectorAll('.xtick text, .ytick text, .y2tick text, .gtitle, .g-xtitle text, '
                                           + '.g-ytitle text, .legendtext')].map(e => [e.textContent, box(e)]),
      }));""", selector)


def test_the_page_in_chromium(explorer: Path, page, tmp_path: Path) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    drawn = "return document.querySelectorAll('#{} .js-plotly-plot').length"
    assert [page.execute_script(drawn.format(section)) for section in ("methods", "training", "reasoning")] == [
        5 + 4, 5, 1]  # a forest plot per metric with a Δ, a reliability diagram per method; loss, sc, anchor, …
    rows = visible_rows(page)  # run × question × method: the drift and emd runs' rows are their own
    assert len(rows) == 2 * 4 + 3 and {row[1] for row in rows} == {"hostile"}
    assert sorted(row[0] for row in rows) == ["drift", "emd", "emd-exact"] + ["evaluate"] * 8
    assert [row[-1] != "–" for row in rows].count(True) == 1

    # filters: search narrows to one question, then to one run and method
    search = page.find_element(By.ID, "f-search")
    search.send_keys("pwned")
    assert {row[2] for row in visible_rows(page)} == {"x-001"}
    set_filter(page, "f-method", "ppr")
    set_filter(page, "f-run", "evaluate")
    rows = visible_rows(page)
    assert [(row[0], row[2], row[4]) for row in rows] == [("evaluate", "x-001", "PPR + NoSEED")]
    assert rows[0][3] == HOSTILE_STEM  # the stem column shows the markup as text

    # click the question: its paths are drawn, one plot per method with paths, equal to the store's θ
    row = page.find_element(By.CSS_SELECTOR, "#question-table tr.pick")
    page.execute_script("arguments[0].scrollIntoView({block: 'center'})", row)
    row.click()
    wait_for(page, "return document.querySelectorAll('.paths-plot').length === 3")
    drawn = page.execute_script("return [...document.querySelectorAll('.paths-plot')].map(div => ["
                                "div.dataset.method, div.data.map(t => [t.meta.option, t.meta.kind, t.y])])")
    with RunStore.open(explorer / "evaluate" / STORE_FILE, read_only=True) as store:
        stored = {row.method: row.thetas for row in store.rows() if row.question_id == "x-001"}
    assert sorted(method for method, _ in drawn) == ["evaluate: am-ppr", "evaluate: ppr", "evaluate: ppr-seed1"]
    for method, traces in drawn:
        theta = stored[method.removeprefix("evaluate: ")]
        for option, kind, y in traces:
            if kind == "paths":
                values = np.array([v for v in y if v is not None]).reshape(theta.shape[:2])
                np.testing.assert_allclose(values, theta[:, :, option], atol=1e-4)
            else:
                np.testing.assert_allclose(y, theta[:, :, option].mean(0), atol=1e-4)
    assert page.find_element(By.ID, "question-stem").text == HOSTILE_STEM
    assert page.execute_script("return window.pwned === undefined")
    options = [item.text for item in page.find_elements(By.CSS_SELECTOR, "#question-detail ul.options li")]
    assert options[0] == "A. <b>bold</b>" and options[1] == "B. &amp; an entity"
    assert "Direct-Query" in wait_for(page, "const p = document.getElementById('paths-absent');"
                                            "return p && !p.hidden && p.textContent")
    assert console_errors(page) == []

    page.execute_script("document.getElementById('question-detail').scrollIntoView()")
    shot = tmp_path / "explorer.png"
    assert page.save_screenshot(str(shot)) and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    all_rows(page)


def show_question(driver, question_id: str) -> None:  # noqa: ANN001
    """The question detail showing `question_id` (a click on its first row in the question browser), whatever question
    an earlier test left open; the search filter cleared again."""
    set_filter(driver, "f-search", question_id)
    driver.execute_script("document.querySelector('#question-table tr.pick').click()")
    set_filter(driver, "f-search", "")
    assert driver.execute_script("return document.getElementById('question-detail').textContent").count(question_id)


def test_single_point_paths_are_points(page) -> None:  # noqa: ANN001
    """AM-PPR's θ̂_1 is one θ per path (no answers drawn): drawn as markers at n = 0 on an axis around 0, not as
    lines that draw nothing on an axis from −1 to 1."""
    show_question(page, "x-001")  # its own question: not the one test_the_page_in_chromium happened to leave open
    wait_for(page, "return document.querySelector('.paths-plot[data-method=\"evaluate: am-ppr\"] .point')")
    (plot,) = plots(page, '.paths-plot[data-method="evaluate: am-ppr"]')
    assert all(trace["mode"] == "markers" and set(trace["x"]) <= {0, None} for trace in plot["traces"])
    assert -0.5 <= plot["x_range"][0] < 0 < plot["x_range"][1] <= 0.5 and plot["x_ticks"] == ["0"]
    points = page.execute_script("return document.querySelectorAll("
                                 "'.paths-plot[data-method=\"evaluate: am-ppr\"] .scatterlayer .point').length")
    assert points == 3 * (3 + 1)  # 3 options × (3 paths + their mean)


def test_labels_stay_inside_their_plots(page) -> None:  # noqa: ANN001
    """No tick label, axis title, plot title or legend entry of any plot (the forest plots' pair labels above all)
    runs outside the plot's box, where it would be clipped."""
    wait_for(page, FITTED)
    outside = [(plot["title"], text, [round(v) for v in box]) for plot in plots(page)
               for text, box in plot["labels"]
               if text and (box[0] < plot["box"][0] - 1 or box[2] > plot["box"][2] + 1
                            or box[1] < plot["box"][1] - 1 or box[3] > plot["box"][3] + 1)]
    assert outside == []
    forest = [plot for plot in plots(page, ".plot.forest")]
    assert forest and all(any("vs" in text for text, _ in plot["labels"]) for plot in forest)


def test_one_display_name_per_method(page) -> None:  # noqa: ANN001
    """Every chart, table and menu names a method by the registry's title ("PPR + NoSEED"), never by its stored
    name ("ppr")."""
    texts = page.execute_script("""
      return [...document.querySelectorAll('.legendtext, .gtitle, .ytick text, .xtick text, main th, main td, '
                                           + 'select option, h3, h4, .note')].map(e => e.textContent);""")
    assert [text for text in texts if RAW_NAME.search(text)] == []
    shown = {row[4] for row in all_rows(page)}
    assert shown == set(TITLES.values())
    menu = page.execute_script("return [...document.querySelectorAll('#f-method option')].map(o => o.textContent)")
    assert set(menu) == {"all", *TITLES.values()}


def test_count_axes_show_whole_numbers(page) -> None:  # noqa: ANN001
    """Answers n, burn-in b, optimiser steps and pairs are counts: no tick at 0.5 or 1.5."""
    show_question(page, "x-001")  # the question section's count axes are its paths plots
    wait_for(page, "return document.querySelectorAll('.paths-plot').length === 3")
    counted = [plot for plot in plots(page) if re.match(r"(n |burn-in|optimiser step|pair)", plot["x_title"])]
    assert {plot["section"] for plot in counted} >= {"questions", "drift", "training", "reasoning"}
    fractional = [(plot["title"], plot["x_ticks"]) for plot in counted
                  if not all(re.fullmatch(r"−?\d+", tick) for tick in plot["x_ticks"])]
    assert fractional == []


def test_reliability_diagrams_count_questions_per_bin(explorer: Path, page) -> None:  # noqa: ANN001
    reliability = page_data(explorer / "report" / "explorer.html")["runs"][0]["reliability"]
    drawn = plots(page, ".plot.reliability")
    assert len(drawn) == len(reliability) == 4
    for diagram, plot in zip(reliability, drawn, strict=True):
        (counts,) = [trace for trace in plot["traces"] if trace["kind"] == "count"]
        assert counts["y"] == diagram["count"] and sum(counts["y"]) == diagram["n"] == 2
        assert [text for text in counts["text"] if text] == [str(c) for c in diagram["count"] if c]


def test_no_whisker_without_a_valid_interval(explorer: Path, page) -> None:  # noqa: ANN001
    """Issue 39 §1: a figure whose bounds the data leave null (ECE here, CE2 below 20 questions) shows `point †` in
    the method table and an open diamond without whisker in its forest plot; CE2 stands beside ECE."""
    data = page_data(explorer / "report" / "explorer.html")["runs"][0]
    table = page.execute_script("return [...document.querySelectorAll('#methods-evaluate tr')].map("
                                "tr => [...tr.children].map(c => c.textContent))")
    header, *rows = table
    assert header[header.index("ECE") + 1] == "CE2"
    for name in ("ECE", "CE2"):
        column = [row[header.index(name)] for row in rows]
        assert column and all(cell.endswith(" †") and "[" not in cell for cell in column), column
    assert all("[" in row[header.index("NLL")] for row in rows)
    for plot in plots(page, ".plot.forest"):
        metric = plot["title"].split()[1]
        valid = {pair["method"]: pair["deltas"][metric][1] is not None for pair in data["paired"]
                 if pair["deltas"][metric][0] is not None}
        with_whisker = [trace for trace in plot["traces"] if trace["kind"] == "interval"]
        without = [trace for trace in plot["traces"] if trace["kind"] == "none"]
        assert len(with_whisker[0]["y"]) == sum(valid.values())
        assert sum(len(trace["y"]) for trace in without) == len(valid) - sum(valid.values())
        if metric == "ECE":
            assert with_whisker[0]["y"] == [] and len(without[0]["y"]) == 3


def test_layout_uses_the_width(page) -> None:  # noqa: ANN001
    """At 1366 px nothing scrolls sideways (the question table included) and each grid of plots fills its row."""
    wait_for(page, FITTED)
    assert page.execute_script("return innerWidth") <= 1366
    assert page.execute_script("return document.documentElement.scrollWidth <= innerWidth")
    assert page.execute_script("const t = document.getElementById('question-table');"
                               "return t.scrollWidth <= t.clientWidth")
    grids = page.execute_script("""
      return [...document.querySelectorAll('.grid')].filter(g => g.querySelector('.js-plotly-plot')).map(g => {
        const r = g.getBoundingClientRect(), plots = [...g.children].map(c => c.getBoundingClientRect());
        const top = plots.filter(p => Math.abs(p.top - plots[0].top) < 2);
        return [g.closest('section').id, (Math.max(...top.map(p => p.right)) - r.left) / r.width];
      });""")
    assert grids and [(section, round(used, 2)) for section, used in grids if used < 0.95] == []


def test_captions_say_what_is_drawn(page) -> None:  # noqa: ANN001
    """The drift test Û is the test; the urn floor is drawn (red, a reference) only where a run computed one, and a
    run without one says why instead."""
    note = wait_for(page, "const p = document.querySelector('#drift > p.note'); return p && p.textContent")
    assert "red" not in note.lower() and "own noise" not in note and "drift test" in note
    with_floor = page.execute_script("return document.getElementById('emd-caption-emd').textContent")
    without = page.execute_script("return document.getElementById('emd-caption-emd-exact').textContent")
    assert "Red: the Pólya-urn floor" in with_floor and "reference" in with_floor
    assert "Red" not in without and "No urn floor for PPR + NoSEED" in without and "enumerated exactly" in without
    floors = [any(trace["kind"] == "floor" for trace in plot["traces"])
              for plot in plots(page, "#drift .js-plotly-plot")]
    assert floors == [True] * 4 + [False] * 4 + [False]  # emd, emd-exact: 2 distances × 2 figures; Figure 1
    gaps = page.execute_script("return document.getElementById('paired-gaps-evaluate').textContent")
    assert "AM-PPR + NoSEED vs PPR + NoSEED: Δ AUC is undefined" in gaps


def test_excluded_questions_are_marked(explorer: Path, browser) -> None:  # noqa: ANN001
    """Under quality control that excludes every question: each row says so (and why), the table's cells say why
    they are empty, the paired comparisons say why they have no Δ, and no reliability diagram is drawn."""
    with RunStore.open(explorer / "evaluate" / STORE_FILE, read_only=True) as store:
        excluded = {(row.question_id, TITLES[row.method]) for row in store.rows() if QualityControl().excludes(row)}
    assert len(excluded) == 2 * 4
    opened(browser, explorer / "report-qc" / "explorer.html")
    rows = browser.execute_script("return [...document.querySelectorAll('#question-table tr.pick')].map(tr => ["
                                  "tr.children[2].textContent, tr.children[4].textContent, tr.children[5].textContent,"
                                  "tr.children[5].title, tr.classList.contains('excluded')])")
    assert {(qid, method) for qid, method, status, _, _ in rows if status == "excluded"} == excluded
    assert all(marked and "label mass below 0.5" in why for *_, why, marked in rows)
    set_filter(browser, "f-qc", "kept")
    assert visible_rows(browser) == []
    cells = browser.execute_script("return [...document.querySelectorAll('#methods-evaluate td')].map(c => c.title)")
    assert any("no question scored" in cell for cell in cells)
    gaps = browser.execute_script("return document.getElementById('paired-gaps-evaluate').textContent")
    assert "PPR + SEED_1 vs PPR + NoSEED: no Δ in any metric, quality control kept no question for both" in gaps
    assert "keeps 0 of 2" in gaps
    assert browser.execute_script("return document.querySelectorAll('#methods .js-plotly-plot').length") == 0
    assert "No diagram for" in browser.execute_script("return document.getElementById('methods').textContent")
    assert console_errors(browser) == []
    set_filter(browser, "f-qc", "")


# ------------------------------------------------------------------------------------------------ issue 48


def stored_rows(explorer: Path, run: str) -> list:
    with RunStore.open(explorer / run / STORE_FILE, read_only=True) as store:
        return store.rows()


def table_cells(driver, selector: str) -> list[list[str]]:  # noqa: ANN001
    """The header and rows of a table as text."""
    return driver.execute_script("return [...document.querySelectorAll(arguments[0] + ' tr')].map("
                                 "tr => [...tr.children].map(c => c.textContent))", selector)


def test_two_runs_of_the_same_methods_stay_apart(explorer: Path, compared) -> None:  # noqa: ANN001
    """Issue 48 §1: two runs of the same questions and methods (float32, bfloat16) give one row per run × question ×
    method, each with its own run's numbers; the run filter keeps one run; a question shows every run's estimates
    and paths, each named with its run."""
    stored = {run: {(row.question_id, row.method): row for row in stored_rows(explorer, run)}
              for run in ("evaluate", "evaluate-bf16")}
    method_of = {title: name for name, title in TITLES.items()}
    rows = all_rows(compared)
    header = table_cells(compared, "#question-table")[0]
    run, qid, method, mass = (header.index(name) for name in ("run", "question", "method", "label mass"))
    assert len(rows) == len({(row[run], row[qid], row[method]) for row in rows}) == 2 * 2 * 4
    for row in rows:
        assert row[mass] == fixed(stored[row[run]][row[qid], method_of[row[method]]].valid_mass_mean, 3)
    set_filter(compared, "f-run", "evaluate-bf16")
    assert [row[run] for row in visible_rows(compared)] == ["evaluate-bf16"] * 8
    set_filter(compared, "f-search", "x-002")
    compared.execute_script("document.querySelector('#question-table tr.pick').click()")
    wait_for(compared, "return document.querySelectorAll('.paths-plot').length === 6")
    drawn = compared.execute_script("return [...document.querySelectorAll('.paths-plot')].map(d => d.dataset.method)")
    assert sorted(drawn) == sorted(f"{name}: {m}" for name in stored for m in ("ppr", "ppr-seed1", "am-ppr"))
    header, *estimates = table_cells(compared, "#estimate-table")
    assert header[:2] == ["run", "estimate"] and header[2 + stored["evaluate"]["x-002", "ppr"].target].endswith("✓")
    own = [row for row in estimates if row[1] in method_of]
    assert len(own) == 2 * 4
    for row in own:
        assert row[2:] == [fixed(p, 3) for p in stored[row[0]]["x-002", method_of[row[1]]].probs]
    all_rows(compared)


def test_the_compare_view(explorer: Path, compared) -> None:  # noqa: ANN001
    """Issue 48 §1: the compare view's Δ = second − first per metric and its p are `report.compare.compare_runs`'
    (written as paired.md writes a Δ), reversed when the runs are swapped; each method's plot holds q* of the key
    under one run against the other, per question."""
    first, second = stored_rows(explorer, "evaluate"), stored_rows(explorer, "evaluate-bf16")
    qc = QualityControl(path_mass=0.0)
    header, *rows = table_cells(compared, "#compare-table")
    expected = compare_runs(first, second, qc, n_resamples=20)
    assert [row[0] for row in rows] == [TITLES[m.method] for m in expected] and rows[0][1] == "2"
    for m, row in zip(expected, rows, strict=True):
        for metric, delta in m.deltas.items():
            column = next(i for i, label in enumerate(header) if label.split(" (")[0] == f"Δ {metric}")
            assert (row[column], row[column + 1]) == (delta_cell(metric, delta), p_cell(delta))
    targets = {row.question_id: row.target for row in first}
    for plot in plots(compared, ".compare-plot"):
        method = method_of_title(plot["title"].split(":")[0])
        pairs = {(a.probs[targets[a.question_id]], b.probs[targets[b.question_id]]) for a in first for b in second
                 if a.method == b.method == method and a.question_id == b.question_id}
        (kept,) = [trace for trace in plot["traces"] if trace["kind"] == "kept"]
        assert set(zip(kept["x"], kept["y"], strict=True)) == pairs
    set_filter(compared, "compare-a", "evaluate-bf16")
    set_filter(compared, "compare-b", "evaluate")
    header, *rows = table_cells(compared, "#compare-table")
    assert compared.execute_script("return document.querySelector('#compare-body h3').textContent") == (
        "evaluate − evaluate-bf16")
    for m, row in zip(expected, rows, strict=True):
        delta = m.deltas["NLL"]
        flipped = PairedDelta(-delta.delta, -delta.high, -delta.low, delta.p)
        assert row[header.index("Δ NLL")] == delta_cell("NLL", flipped)
    set_filter(compared, "compare-a", "evaluate")
    set_filter(compared, "compare-b", "evaluate-bf16")


def method_of_title(title: str) -> str:
    return {value: name for name, value in TITLES.items()}[title]


def test_the_page_rounds_once_as_the_tables_do(explorer: Path, compared) -> None:  # noqa: ANN001
    """Issue 48 §4: every number on the page is the CSV's full-precision number rounded once by the tables' rule
    (`report.text.fixed`: to even, never -0), so its method tables read as metrics.csv rounded by tables.md's cells;
    the page's own `fixed` agrees with Python's on exact ties (where toFixed rounds away from zero) and near them."""
    ties = [[0.125, 2], [0.375, 2], [-0.125, 2], [2.5, 0], [-0.5, 0], [6.25, 1], [100 * 0.0625, 1], [0.930045, 4],
            [264.9705, 3], [-1e-9, 4], [0.00005, 4], [1e3 * 0.2649705, 3]]
    rng = np.random.default_rng(0)
    values = ties + [[float(v), int(d)] for v, d in zip(rng.normal(0, 10, 300), rng.integers(0, 5, 300), strict=True)]
    assert compared.execute_script("return arguments[0].map(([v, d]) => fixed(v, d))", values) == [
        fixed(v, d) for v, d in values]
    cell = compared.execute_script("return intervalText([0.0625, 0.0125, 0.1125], {name: 'ACC', percent: true})")
    assert cell == f"{format_value('ACC', 0.0625)} [{format_value('ACC', 0.0125)}, {format_value('ACC', 0.1125)}]"
    with open(explorer / "compare" / "metrics.csv", newline="") as handle:
        scored = list(csv.DictReader(handle))
    for run in ("evaluate", "evaluate-bf16"):
        header, *rows = table_cells(compared, f"#methods-{run}")
        assert len(rows) == 8  # 4 methods, and (RB) and (θ̂_1) of PPR + NoSEED and PPR + SEED_1
        for row in rows:
            (line,) = [line for line in scored if line["dataset"] == f"hostile ({run})" and line["title"] == row[0]]
            summary = {m: tuple(float(line[f"{m}{s}"]) for s in ("", "_low", "_high")) for m in SCORE_METRICS}
            score = SimpleNamespace(summary={**summary, "nll_clipped": int(line["nll_clipped"] or 0)})
            for metric in SCORE_METRICS:
                column = header.index(f"{metric} (%)" if REPORT_METRICS.get(metric, None) and
                                      REPORT_METRICS[metric].percent else metric)
                assert row[column] == format_cell(score, metric), (run, row[0], metric)


def test_the_page_holds_the_csvs_full_precision(explorer: Path) -> None:
    """Issue 48 §4: the page's data hold the numbers of metrics.csv exactly (no rounding before the page's own)."""
    data = page_data(explorer / "compare" / "explorer.html")
    with open(explorer / "compare" / "metrics.csv", newline="") as handle:
        lines = {(row["dataset"], row["title"]): row for row in csv.DictReader(handle)}
    compared = 0
    for run in data["runs"]:
        for row in run["table"]:
            line = lines[f"hostile ({run['name']})", row["method"]]
            for metric in SCORE_METRICS:
                expected = [float(line[f"{metric}{s}"]) for s in ("", "_low", "_high")]
                assert row[metric] == [None if np.isnan(v) else v for v in expected]
                compared += 1
    assert compared == 2 * 8 * len(SCORE_METRICS)  # 2 runs × (4 methods + 4 alternative estimates)


def test_question_texts_come_from_what_the_run_stored(explorer: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 48 §2: a run keeps its questions beside its store (questions.jsonl), and the page shows them even where
    its data set cannot be loaded; a run from before that file, whose data set is gone, shows its ids and its
    options' letters."""
    def unloadable(*args: object, **kwargs: object) -> None:
        raise FileNotFoundError("the data set is gone")

    monkeypatch.setattr("beliefdrift.report.explorer.load_dataset", unloadable)
    qc = QualityControl(path_mass=0.0)
    (run,) = explorer_data([explorer / "evaluate"], tmp_path / "page", qc, n_resamples=5)["runs"]
    assert {q["id"]: q["stem"] for q in run["questions"]} == {"x-001": HOSTILE_STEM,
                                                             "x-002": HOSTILE[1]["question"]["stem"]}
    older = tmp_path / "older"
    shutil.copytree(explorer / "evaluate", older)
    (older / QUESTIONS_FILE).unlink()
    (run,) = explorer_data([older], tmp_path / "older-page", qc, n_resamples=5)["runs"]
    assert {(q["stem"], tuple(q["labels"])) for q in run["questions"]} == {("", ("A", "B", "C"))}


def test_a_page_of_one_run_says_there_is_nothing_to_compare(page) -> None:  # noqa: ANN001
    assert "No two evaluate runs here share a question" in page.execute_script(
        "return document.getElementById('compare').textContent")
    assert page.execute_script("return document.getElementById('compare-controls').hidden")


def test_small_things_on_the_page(explorer: Path, page) -> None:  # noqa: ANN001
    """Issue 48 §7: EMD_k(b) is titled with its k (-k 3 here) and its ±std whiskers stop at 0; the reasoning curve
    starts at c_1, as the tables count, beside each condition's parsed answers (‡ where few parse, issue 48 §3); a
    run's time is the compute time it stored where `paper` recorded none (– for a drift run, which stores none)."""
    titles = [plot["title"] for plot in plots(page, "#drift .js-plotly-plot")]
    assert [title for title in titles if title.startswith("EMD_")] == ["EMD_3(b) (l1)", "EMD_3(b) (kl)"] * 2
    lows = page.execute_script("""return [...document.querySelectorAll('#drift .js-plotly-plot')].flatMap(div =>
        div.data.filter(t => t.error_y && t.error_y.arrayminus && t.type === 'scatter')
                .map(t => t.y.map((y, i) => y - t.error_y.arrayminus[i])))""")
    assert lows and min(min(low) for low in lows) >= 0
    (reasoning,) = plots(page, "#reasoning .js-plotly-plot")
    assert reasoning["traces"][0]["x"][0] == 1 and reasoning["x_ticks"][0] == "1"
    header, row = table_cells(page, "#reasoning-counts-reasoning")
    assert row[header.index("answers parsed")] == "2 of 48 ‡" and row[header.index("majority acc.")] == "0.00 ‡"
    assert "‡: fewer than 50% of the pairs' answers parse for no seeds" in page.execute_script(
        "return document.getElementById('reasoning').textContent")
    times = page.execute_script("return [...document.querySelectorAll('#runs-body tr')].slice(1).map("
                                "tr => [tr.children[0].textContent, tr.children[3].textContent, tr.children[3].title])")
    rows = stored_rows(explorer, "evaluate")
    seconds = sum(t for _, t in {(row.question_id, row.seconds) for row in rows})
    assert times[0] == ["evaluate", fixed(seconds, 1), "compute time: the sum of the per-question (train: "
                        "per-update) times the run stored"]
    assert times[1] == ["drift", "–", "a drift run stores no time"]
