"""Headless Chromium for the console's tests, driven by Selenium, with axe-core's checks.

Debian's ``chromium`` and ``chromium-driver`` (installed by ``make test-deps``) are used
as they are: Selenium is pointed at both, so it downloads nothing. The flags keep
Chromium off the network this machine does not have.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
AXE = Path(__file__).parent / "vendor" / "axe.min.js"
#: Where the screenshots go (a CI job keeps this folder as its artifacts).
ARTIFACTS = Path(
    os.environ.get("TIDEMARK_ARTIFACTS", Path(__file__).parents[2] / "logs" / "artifacts")
)
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
)


class Browser:
    """One Chromium, its screenshots and the checks the console's tests share."""

    def __init__(self, driver: webdriver.Chrome, downloads: Path, shots: Path) -> None:
        self.driver, self.downloads, self.shots = driver, downloads, shots

    def open(self, url: str) -> None:
        self.driver.get(url)

    def find(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css: str) -> str:
        found = self.all(css)
        return found[0].text if found else ""

    def until(self, what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
        """``check()`` once truthy (exceptions count as not yet); a screenshot if never."""
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while time.monotonic() < deadline:
            try:
                found = check()
                if found:
                    return found
            except Exception as exc:  # the page may be between two renders
                last = exc
            time.sleep(0.2)
        self.shot(f"timeout-{what.replace(' ', '-')}")
        raise AssertionError(f"timed out waiting for {what} (last error: {last!r})")

    def click(self, css: str) -> None:
        self.until(f"{css} to be enabled", lambda: self.find(css).is_enabled())
        self.find(css).click()

    def confirm(self) -> None:
        """Press Confirm in the console's confirmation dialog."""
        self.until(
            "the confirmation", lambda: self.find("#confirm").get_attribute("open") is not None
        )
        self.find("#confirm-ok").click()

    def set_value(self, css: str, value: str) -> None:
        """Set a field as typing would (one input event), for long documents."""
        self.driver.execute_script(
            "const el = document.querySelector(arguments[0]); el.value = arguments[1];"
            "el.dispatchEvent(new Event('input', {bubbles: true}));",
            css,
            value,
        )

    def fetch(self, method: str, path: str, headers: dict[str, str] | None = None) -> int:
        """The status of a ``fetch`` made by the page (its cookie, the headers given)."""
        return int(
            self.driver.execute_async_script(
                "const done = arguments[arguments.length - 1];"
                "fetch(arguments[1], {method: arguments[0], headers: arguments[2],"
                " body: arguments[0] === 'GET' ? undefined : '{}', credentials: 'same-origin'})"
                ".then(r => done(r.status), e => done(-1));",
                method,
                path,
                headers or {},
            )
        )

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def accessibility_violations(self) -> list[dict[str, Any]]:
        """axe-core's violations of WCAG 2.x A and AA on the page as shown."""
        self.driver.execute_script(AXE.read_text())
        result = self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "axe.run(document, {runOnly: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa',"
            " 'best-practice']}).then(r => done(JSON.stringify(r.violations)),"
            " e => done(JSON.stringify([{id: 'axe failed', help: String(e)}])));"
        )
        return [
            {
                "id": v["id"],
                "help": v["help"],
                "nodes": [n.get("target") for n in v.get("nodes", [])],
            }
            for v in json.loads(result)
        ]

    def policy_violations(self) -> list[str]:
        """What the browser's console said about the Content-Security-Policy since last asked."""
        return [
            entry["message"]
            for entry in self.driver.get_log("browser")
            if "Content Security Policy" in entry["message"]
        ]


@contextmanager
def chromium(root: Path, name: str) -> Iterator[Browser]:
    """A headless Chromium with its own profile and download folder under ``root``; its
    screenshots in ``ARTIFACTS/<name>``. Quit (with its driver) at the end."""
    downloads, shots = root / "downloads", ARTIFACTS / name
    downloads.mkdir(parents=True, exist_ok=True)
    shots.mkdir(parents=True, exist_ok=True)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={root / 'profile'}"):
        options.add_argument(flag)
    options.add_experimental_option(
        "prefs",
        {"download.default_directory": str(downloads), "download.prompt_for_download": False},
    )
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield Browser(driver, downloads, shots)
    finally:
        driver.quit()
