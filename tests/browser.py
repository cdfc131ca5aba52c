"""Headless Chromium for the browser tests (the explorer, the demo's page, the docs site): Debian's `chromium` and
`chromium-driver` through selenium, skipped with the reason where they are missing (`.ci/run` installs them). One
browser serves every test of a session: the `browser` fixture of `tests/conftest.py`."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

#: The window the pages are checked at: a common laptop screen (issue 39 measured the layout at 1366 px).
WINDOW = (1366, 900)


def chromium() -> Iterator[Any]:
    """A headless Chromium WebDriver with the browser's console log kept; skips where it cannot start."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="browser tests need selenium (pip install selenium)")
    binary, driver_binary = shutil.which("chromium"), shutil.which("chromedriver")
    if not (binary and driver_binary):
        pytest.skip("browser tests need Debian's chromium and chromium-driver (apt-get install chromium "
                    "chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     f"--window-size={WINDOW[0]},{WINDOW[1]}"):
        options.add_argument(argument)
    options.binary_location = binary
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_binary), options=options)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver: Any, script: str, timeout: float = 30.0) -> Any:
    """The first truthy value of `script` run in the page, polled until `timeout` seconds."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(lambda d: d.execute_script(script))


def console_errors(driver: Any) -> list[dict[str, Any]]:
    """The console's errors since the last call (a failed resource load included)."""
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
