"""Shared test helpers: paths of the msprobe fixtures copied into the project (tests/data), and a headless Chromium
for the tests that look at report.html as a browser lays it out (``driver``)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
MSPROBE_FIXTURES = DATA / "msprobe-1.2.2-mindspore"


@pytest.fixture
def msprobe_fixtures() -> Path:
    """The real msprobe 1.2.2 dumps (see tests/data/msprobe-1.2.2-mindspore/FIXTURES_README.md)."""
    return MSPROBE_FIXTURES


CHROMIUM = Path(os.environ.get("MSPROBE_CMP_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("MSPROBE_CMP_CHROMEDRIVER", "/usr/bin/chromedriver"))
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1400,1800")


def _missing() -> list[str]:
    missing = [f"{p} (apt-get install chromium chromium-driver)" for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if importlib.util.find_spec("selenium") is None:
        missing.append("selenium (pip install -e '.[test]')")
    return missing


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    """Debian's headless Chromium through its chromedriver (Selenium), 1,400 x 1,800.  Without them the test skips,
    except under CI (env var CI set), where it fails: .ci/run installs the packages."""
    missing = _missing()
    if missing:
        message = "the browser test of report.html needs " + ", ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(message + " (CI is set: this test must run)")
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    drv.set_page_load_timeout(60)
    try:
        yield drv
    finally:
        drv.quit()
