"""The run explorer at the paper's size: a synthetic evaluate run store of Q questions × 4 methods × J paths × N
answers (5 options; random θ paths, the store's real format), then `beliefdrift report --html` over it, then the page
in headless Chromium. Prints the page's and its explorer-data/ folder's sizes, the time to write them, the time the
page takes to load and draw its tables, and the time from a click on a question to its drawn paths.

    python bench/explorer.py OUT [--questions 1000] [--paths 32] [--steps 100]

With `--screenshot PNG` it instead evaluates four questions of the demo set on the default model (direct, ppr,
ppr-seed1; J = 4, N = 6), writes the explorer over that run, opens its first question in Chromium at 1366 × 1000 and
saves the view (the figure of docs/explorer.md):

    python bench/explorer.py OUT --screenshot docs/figures/explorer_question.png

With `--compare-screenshot PNG` it evaluates eight questions of the demo set on the default model twice, in bfloat16
and in float32 (direct, ppr, ppr-seed1; J = 4, N = 6), writes the explorer over both runs and saves its compare
view (the second figure of docs/explorer.md). `--no-browser` writes the synthetic run's page and prints its sizes
without opening it.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import numpy as np

from beliefdrift.cli.main import main
from beliefdrift.runs.store import STORE_FILE, ResultRow, RunStore

METHODS = ("direct", "ppr", "ppr-seed1", "ppr-seed5")
OPTIONS = 5


def synthetic_run(out: Path, questions: int, paths: int, steps: int) -> Path:
    """A run store with random Dirichlet-walk paths in the format evaluate writes."""
    rng = np.random.default_rng(0)
    run = out / "evaluate"
    with RunStore.open(run / STORE_FILE) as store:
        store.ensure_config({"command": "evaluate", "dataset": "synthetic", "methods": list(METHODS),
                             "questions": questions, "paths": paths, "steps": steps})
        for q in range(questions):
            target, rows = int(rng.integers(OPTIONS)), []
            for method in METHODS:
                if method == "direct":
                    probs = rng.dirichlet(np.ones(OPTIONS))
                    rows.append(ResultRow(f"q{q:04d}", method, q, target, OPTIONS, probs, np.full((1, 1), 0.9)))
                    continue
                logits = np.cumsum(rng.normal(0, 0.3, (paths, steps + 1, OPTIONS)), axis=1)
                thetas = (np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)).astype(np.float32)
                seeds = int(method.removeprefix("ppr").removeprefix("-seed") or 0)
                rows.append(ResultRow(
                    f"q{q:04d}", method, q, target, OPTIONS, thetas[:, -1].mean(0).astype(np.float64),
                    np.full((paths, steps + 1), 0.9), rng.integers(0, OPTIONS, (paths, steps)),
                    rng.integers(0, OPTIONS, (paths, seeds)), thetas,
                    alternatives={"q_star_rb": thetas[:, 1:].mean((0, 1)).astype(np.float64),
                                  "theta_1": thetas[:, 1].mean(0).astype(np.float64)}))
            store.add(rows)
    return run


def chromium(width: int = 1366, height: int = 900):  # noqa: ANN201 (selenium's WebDriver)
    """Headless Chromium at `width` × `height` (Debian's chromium and chromedriver)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", f"--window-size={width},{height}"):
        options.add_argument(argument)
    options.binary_location = shutil.which("chromium")
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.set_page_load_timeout(600)
    return driver


def open_first_question(driver, page: Path, paths_plots: int) -> tuple[float, float]:  # noqa: ANN001
    """Load `page` until its question table is drawn, click the first question and wait for its `paths_plots`
    plots; the seconds each took."""
    from selenium.webdriver.support.ui import WebDriverWait

    start = time.perf_counter()
    driver.get(page.as_uri())
    wait = WebDriverWait(driver, 600)
    wait.until(lambda d: d.execute_script("return document.querySelectorAll('#question-table tr.pick').length"))
    loaded = time.perf_counter() - start
    start = time.perf_counter()
    driver.execute_script("document.querySelector('#question-table tr.pick').click()")
    wait.until(lambda d: d.execute_script(f"return document.querySelectorAll('.paths-plot').length === {paths_plots}"))
    return loaded, time.perf_counter() - start


def browser_timings(page: Path) -> tuple[float, float]:
    """Seconds to load the page until its question table is drawn, and from a click on a question to its paths."""
    driver = chromium()
    try:
        return open_first_question(driver, page, 3)
    finally:
        driver.quit()


def question_screenshot(out: Path, png: Path) -> None:
    """The explorer over a small real run on the demo set, its first question opened, saved as `png`."""
    run = out / "demo"
    assert main(["evaluate", "--dataset", "demo", "-n", "4", "-J", "4", "-N", "6", "--methods", "direct", "ppr",
                 "ppr-seed1", "--bootstrap", "200", "--out", str(run)]) == 0
    assert main(["report", str(run), "--html", "--bootstrap", "200", "--out", str(out / "demo-report")]) == 0
    save_view(out / "demo-report" / "explorer.html", 2, "question-detail", png)


def save_view(page: Path, paths_plots: int, element: str, png: Path) -> None:
    """`page` at 1366 × 1000 with its first question open (`paths_plots` plots), scrolled to `element`, as `png`."""
    driver = chromium(height=1000)
    try:
        open_first_question(driver, page, paths_plots)
        driver.execute_script(f"document.getElementById('{element}').scrollIntoView(); scrollBy(0, -48)")
        time.sleep(1)  # plotly's layout settles
        png.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(png))
    finally:
        driver.quit()
    print(f"wrote {png}")


def compare_screenshot(out: Path, png: Path) -> None:
    """The explorer's compare view over two real runs of the demo set (bfloat16, float32), saved as `png`."""
    runs = [out / f"demo-{dtype}" for dtype in ("bfloat16", "float32")]
    for run in runs:
        assert main(["evaluate", "--dataset", "demo", "-n", "8", "-J", "4", "-N", "6", "--methods", "direct", "ppr",
                     "ppr-seed1", "--dtype", run.name.removeprefix("demo-"), "--bootstrap", "200", "--qc-path-mass",
                     "0", "--out", str(run)]) == 0
    assert main(["report", *map(str, runs), "--html", "--bootstrap", "200", "--qc-path-mass", "0",
                 "--out", str(out / "compare-report")]) == 0
    save_view(out / "compare-report" / "explorer.html", 4, "compare", png)


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--paths", type=int, default=32)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--screenshot", type=Path, help="save a question of a small demo run as this PNG instead")
    parser.add_argument("--compare-screenshot", type=Path, help="save the compare view of two small demo runs as "
                                                                 "this PNG instead")
    parser.add_argument("--no-browser", action="store_true", help="write the page and print its sizes only")
    args = parser.parse_args()
    if args.screenshot:
        question_screenshot(args.out, args.screenshot)
        return
    if args.compare_screenshot:
        compare_screenshot(args.out, args.compare_screenshot)
        return
    start = time.perf_counter()
    run = synthetic_run(args.out, args.questions, args.paths, args.steps)
    print(f"store: {(run / STORE_FILE).stat().st_size / 1e6:.1f} MB in {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    assert main(["report", str(run), "--html", "--bootstrap", "200", "--out", str(args.out / "report")]) == 0
    print(f"report --html: {time.perf_counter() - start:.1f} s")
    page = args.out / "report" / "explorer.html"
    sidecar = sum(path.stat().st_size for path in (page.parent / "explorer-data").iterdir())
    print(f"explorer.html: {page.stat().st_size / 1e6:.1f} MB; explorer-data/: {sidecar / 1e6:.1f} MB "
          f"({args.questions} files)")
    if args.no_browser:
        return
    loaded, clicked = browser_timings(page)
    print(f"chromium: page loaded and drawn in {loaded:.1f} s; a question's paths drawn {clicked:.2f} s after "
          "the click")


if __name__ == "__main__":
    main_bench()
