"""The run explorer at the paper's size: a synthetic evaluate run store of Q questions × 4 methods × J paths × N
answers (5 options; random θ paths, the store's real format), then `beliefdrift report --html` over it, then the page
in headless Chromium. Prints the page's and its explorer-data/ folder's sizes, the time to write them, the time the
page takes to load and draw its tables, and the time from a click on a question to its drawn paths.

    python bench/explorer.py OUT [--questions 1000] [--paths 32] [--steps 100]
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


def browser_timings(page: Path) -> tuple[float, float]:
    """Seconds to load the page until its question table is drawn, and from a click on a question to its paths."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(argument)
    options.binary_location = shutil.which("chromium")
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.set_page_load_timeout(600)
    try:
        start = time.perf_counter()
        driver.get(page.as_uri())
        wait = WebDriverWait(driver, 600)
        wait.until(lambda d: d.execute_script("return document.querySelectorAll('#question-table tr.pick').length"))
        loaded = time.perf_counter() - start
        start = time.perf_counter()
        driver.execute_script("document.querySelector('#question-table tr.pick').click()")
        wait.until(lambda d: d.execute_script("return document.querySelectorAll('.paths-plot').length === 3"))
        return loaded, time.perf_counter() - start
    finally:
        driver.quit()


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--paths", type=int, default=32)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
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
    loaded, clicked = browser_timings(page)
    print(f"chromium: page loaded and drawn in {loaded:.1f} s; a question's paths drawn {clicked:.2f} s after "
          "the click")


if __name__ == "__main__":
    main_bench()
