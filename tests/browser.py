"""Debian's Chromium under Selenium, for the page that `clocktune serve` serves (tests and scripts).

The browser is found at /usr/bin/chromium (with /usr/bin/chromedriver), and installed with apt-get when it is
missing: `playwright install` and Selenium Manager download browsers, which this machine cannot.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
DRIVER = "/usr/bin/chromedriver"


def ensure_chromium() -> None:
    """Installs Debian's chromium and chromium-driver when they are not there yet.

    Raises:
        RuntimeError: When they are missing and cannot be installed (the test fails, it is not skipped).
    """
    if Path(CHROMIUM).exists() and Path(DRIVER).exists():
        return
    apt = shutil.which("apt-get")
    if apt is None:
        raise RuntimeError(f"{CHROMIUM} and {DRIVER} are missing and there is no apt-get to install them")
    done = subprocess.run(
        [apt, "install", "-y", "--no-install-recommends", "chromium", "chromium-driver"],
        capture_output=True,
        text=True,
        env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    if done.returncode != 0 or not Path(CHROMIUM).exists():
        raise RuntimeError(f"apt-get install chromium chromium-driver failed:\n{done.stderr[-2000:]}")


def headless_chromium():
    """A headless Chromium driven by Selenium, with a fresh profile (:func:`quit_chromium` when done)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    ensure_chromium()
    profile = tempfile.mkdtemp(prefix="clocktune-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1100,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.profile_folder = profile
    return driver


def quit_chromium(driver) -> None:
    """Quits the browser and removes its profile folder."""
    driver.quit()
    shutil.rmtree(driver.profile_folder, ignore_errors=True)


def spoken_words(timeline) -> list[str]:
    """The words of a timeline's user chunks as the user finally said them (a revision replaces what it revises)."""
    chunks = {}
    for event in timeline.events:
        if event.kind == "user_chunk":
            chunks.pop(event.revises, None)
            chunks[event.id] = event.text
    return " ".join(chunks.values()).split()


def rows(driver) -> list[tuple[str, str, str]]:
    """The page's timeline: (class, who, text) of each row, read in one script (rows change while the agent acts)."""
    script = (
        "return [...document.querySelectorAll('#timeline li')].map((li) =>"
        " [li.className, li.querySelector('.who').textContent, li.querySelector('.text').textContent]);"
    )
    return [tuple(row) for row in driver.execute_script(script)]


def speak(driver, words: list[str], words_per_s: float, before_enter=None) -> None:
    """Types ``words`` into the page at a speaking pace, then Enter; ``before_enter(driver)`` runs just before it."""
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element("id", "speech")
    for word in words:
        box.send_keys(word + " ")
        time.sleep(1.0 / words_per_s)
    if before_enter is not None:
        before_enter(driver)
    box.send_keys(Keys.ENTER)


def wait_for_row(driver, predicate, timeout_s: float = 60.0) -> tuple[str, str, str]:
    """The first timeline row ``predicate`` accepts, waiting up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for row in rows(driver):
            if predicate(row):
                return row
        time.sleep(0.05)
    raise AssertionError(f"no such row within {timeout_s} s; the page shows {rows(driver)}")
