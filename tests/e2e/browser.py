"""Debian's headless Chromium driven through its chromedriver (make test installs both)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Headless, and nothing that reaches for the network this machine does not have.
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,860",
)
T = TypeVar("T")


@contextmanager
def chromium(downloads: Path, *more_flags: str) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, *more_flags):
        options.add_argument(flag)
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads)})
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(what: Callable[[], T | None], timeout: float = 30.0, every: float = 0.05) -> T:
    """`what()`'s first true value within `timeout` seconds (a stale element counts as
    not yet)."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = what()
            if value:
                return value
        except Exception as error:  # the page was redrawn under the lookup
            last_error = error
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s (last error: {last_error!r})")
