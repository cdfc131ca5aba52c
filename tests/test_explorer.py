"""The run explorer (`report --html`): the page's data against the run store, escaping of question texts, and the
page driven in headless Chromium (Debian's `chromium` and `chromium-driver` through selenium; skipped where they are
missing): it loads with no console error, the question browser filters, a clicked question's plotted paths are the
store's θ, and a screenshot is written."""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from beliefdrift.cli.main import main
from beliefdrift.report.explorer import QUANT, SIDECAR_DIR, plotly_js, script_json
from beliefdrift.runs.store import STORE_FILE, RunStore

pytest.importorskip("plotly", reason="the explorer embeds plotly.js from the plotly package")

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
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture(scope="module")
def explorer(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A tiny evaluate run on the hostile questions (tiny model) and a drift run on one of them, and the explorer
    page over both."""
    root = tmp_path_factory.mktemp("explorer")
    data = root / "hostile.jsonl"
    data.write_text("".join(json.dumps(record) + "\n" for record in HOSTILE))
    template = root / "short.txt"
    template.write_text("{question}\nAnswers ({choice_str}), one per line:\n")
    common = ["--model", str(tiny_model_dir), "--dtype", "float32", "--seed", "3", "--dataset", str(data),
              "--template", str(template)]
    assert main(["evaluate", *common, "-J", "3", "-N", "4", "--methods", "direct", "ppr", "ppr-seed1",
                 "--qc-path-mass", "0", "--bootstrap", "20", "--out", str(root / "evaluate")]) == 0
    assert main(["drift", *common, "--n", "1", "-J", "2", "-N", "3", "--methods", "ppr",
                 "--out", str(root / "drift")]) == 0
    # train's log.csv and the reasoning summary as those commands write them (their runs take minutes)
    (root / "train").mkdir()
    (root / "train" / "log.csv").write_text("step,epoch,loss,sc,anchor,format,val_emd_l1\n1,0,2.5,1.5,0.5,0.5,\n"
                                            "2,0,2.0,1.2,0.4,0.4,0.3\n")
    (root / "reasoning").mkdir()
    (root / "reasoning" / "summary.json").write_text(json.dumps({"command": "reasoning", "conditions": {
        "plain": {"title": "no seeds", "curve_mean": [1.0, 0.8, None], "curve_std": [0.0, 0.1, None]}}}))
    assert main(["report", *(str(root / name) for name in ("evaluate", "drift", "train", "reasoning")), "--html",
                 "--bootstrap", "20", "--qc-path-mass", "0", "--out", str(root / "report")]) == 0
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
        ("evaluate", "evaluate"), ("drift", "drift"), ("train", "train"), ("reasoning", "reasoning")]
    evaluate, drift, train, _ = data["runs"]
    assert train["log"]["loss"] == [2.5, 2.0] and train["log"]["val_emd_l1"] == [None, 0.3]
    assert "torch" in data["environment"]["libraries"]
    assert {row["name"] for row in evaluate["table"]} == {"direct", "ppr", "ppr-seed1"}
    questions = {q["id"]: q for q in evaluate["questions"]}
    assert questions["x-001"]["stem"] == HOSTILE_STEM and questions["x-001"]["options"][0] == "<b>bold</b>"
    assert set(drift["questions"][0]["methods"]["ppr"]) == {"marginal_mean", "marginal_shift", "cid_l1"}
    with RunStore.open(explorer / "evaluate" / STORE_FILE, read_only=True) as store:
        rows = [row for row in store.rows() if row.thetas is not None]
    for row in rows:
        theta = sidecar_theta(page.parent / questions[row.question_id]["paths"])[row.method]
        np.testing.assert_allclose(theta, row.thetas, atol=0.5 / QUANT + 1e-7)
    # nothing from outside (plotly.js aside, whose strings name its web site), and no question text as markup: `<`
    # only reaches the page escaped
    text = page.read_text()
    own = text.replace(plotly_js(), "")
    assert len(own) < len(text) and not re.search(r'(src|href)="(https?:)?//', own)
    assert "<script>window.pwned" not in text and "<b>bold" not in text
    assert len(list((page.parent / SIDECAR_DIR).glob("*.js"))) == len(questions)


def test_script_json_cannot_close_a_script() -> None:
    text = script_json({"a": "</script><!--", "b": float("nan"), "c": np.float32(0.1234567)})
    assert "<" not in text and json.loads(text) == {"a": "</script><!--", "b": None, "c": 0.12346}


@pytest.fixture(scope="module")
def browser():  # noqa: ANN201 (selenium's WebDriver, imported only where installed)
    webdriver = pytest.importorskip("selenium.webdriver", reason="browser tests need selenium (pip install selenium)")
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("browser tests need Debian's chromium and chromium-driver (apt-get install chromium "
                    "chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1000"):
        options.add_argument(argument)
    options.binary_location = CHROMIUM
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(120)
    yield driver
    driver.quit()


def wait_for(driver, script: str, timeout: float = 30.0):  # noqa: ANN001, ANN201
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(lambda d: d.execute_script(script))


def visible_rows(driver) -> list[list[str]]:  # noqa: ANN001
    return driver.execute_script("return [...document.querySelectorAll('#question-table tr.pick')].map("
                                 "tr => [...tr.children].map(td => td.textContent))")


def test_the_page_in_chromium(explorer: Path, browser, tmp_path: Path) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    page = explorer / "report" / "explorer.html"
    browser.get(page.as_uri())
    wait_for(browser, "return document.querySelectorAll('#question-table tr.pick').length > 0")
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []
    drawn = "return document.querySelectorAll('#{} .js-plotly-plot').length"
    assert [browser.execute_script(drawn.format(section)) for section in ("methods", "training", "reasoning")] == [
        5 + 3, 5, 1]  # a forest plot per metric and a reliability diagram per method; loss, sc, anchor, format, val
    rows = visible_rows(browser)  # question × method; the drift run's question joins its evaluate row
    assert len(rows) == 2 * 3 and {row[0] for row in rows} == {"hostile"}
    assert [row[-1] != "–" for row in rows].count(True) == 1

    # filters: search narrows to one question, then to one method
    search = browser.find_element(By.ID, "f-search")
    search.send_keys("pwned")
    assert {row[1] for row in visible_rows(browser)} == {"x-001"}
    browser.execute_script("const s = document.getElementById('f-method'); s.value = 'ppr';"
                           "s.dispatchEvent(new Event('input'))")
    rows = visible_rows(browser)
    assert [(row[1], row[3]) for row in rows] == [("x-001", "ppr")]
    assert rows[0][2] == HOSTILE_STEM  # the stem column shows the markup as text

    # click the question: its paths are drawn, one plot per method with paths, equal to the store's θ
    row = browser.find_element(By.CSS_SELECTOR, "#question-table tr.pick")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", row)
    row.click()
    wait_for(browser, "return document.querySelectorAll('.paths-plot').length === 2")
    plots = browser.execute_script("return [...document.querySelectorAll('.paths-plot')].map(div => ["
                                   "div.dataset.method, div.data.map(t => [t.meta.option, t.meta.kind, t.y])])")
    with RunStore.open(explorer / "evaluate" / STORE_FILE, read_only=True) as store:
        stored = {row.method: row.thetas for row in store.rows() if row.question_id == "x-001"}
    assert sorted(method for method, _ in plots) == ["evaluate: ppr", "evaluate: ppr-seed1"]
    for method, traces in plots:
        theta = stored[method.removeprefix("evaluate: ")]
        for option, kind, y in traces:
            if kind == "paths":
                drawn = np.array([v for v in y if v is not None]).reshape(theta.shape[:2])
                np.testing.assert_allclose(drawn, theta[:, :, option], atol=1e-4)
            else:
                np.testing.assert_allclose(y, theta[:, :, option].mean(0), atol=1e-4)
    assert browser.find_element(By.ID, "question-stem").text == HOSTILE_STEM
    assert browser.execute_script("return window.pwned === undefined")
    options = [item.text for item in browser.find_elements(By.CSS_SELECTOR, "#question-detail ul.options li")]
    assert options[0] == "A. <b>bold</b>" and options[1] == "B. &amp; an entity"
    assert [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"] == []

    browser.execute_script("document.getElementById('question-detail').scrollIntoView()")
    shot = tmp_path / "explorer.png"
    assert browser.save_screenshot(str(shot)) and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
