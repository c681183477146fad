"""Debian's headless Chromium driven by Playwright, as the console's browser tests and its pictures launch it: the
executable on the PATH (Playwright's own download needs a network this project does not assume; ``make browser``
installs Debian's), with no sandbox (the tests run as root) and none of the background connections a closed
network refuses."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

from playwright.sync_api import Browser, sync_playwright

CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
MISSING = "Debian's chromium is not on the PATH: make browser installs it (make test runs it first)"


class NoChromiumError(RuntimeError):
    """No ``chromium`` on the PATH."""


@contextmanager
def chromium() -> Iterator[Browser]:
    """A headless Chromium, closed on leaving; :class:`NoChromiumError` when there is none."""
    executable = shutil.which("chromium")
    if executable is None:
        raise NoChromiumError(MISSING)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=list(CHROMIUM_ARGS), headless=True)
        try:
            yield browser
        finally:
            browser.close()
