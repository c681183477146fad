"""The console tier's fixtures: the app over a fake source and its test client, and a real browser.

* ``source``: :func:`fakes.demo_source`; ``app``: the console over it (token :data:`TOKEN`, the source's clock);
  ``client``: Flask's test client holding the console's cookie.
* ``browser``: Debian's Chromium driven by Playwright, one for the session (it fails, never skips, without it);
  ``open_console``: a function that serves any app (:class:`ConsoleServer`) and opens it in a new page of that
  browser, logged in with the token; another module passes an app over another source. Every page it opened must
  end with no console error, no uncaught script error and no Content-Security-Policy violation.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest
from fakes import TOKEN, BrowserConsole, FakeSource, demo_source
from flask import Flask
from flask.testing import FlaskClient
from playwright.sync_api import Browser, ConsoleMessage, sync_playwright

from punctual_tools.console.app import COOKIE, create_app
from punctual_tools.console.server import ConsoleServer

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
EXPECT_TIMEOUT_MS = 30_000  # generous: the machine may be busy; an assertion returns as soon as it holds


@pytest.fixture
def source() -> FakeSource:
    return demo_source()


@pytest.fixture
def app(source: FakeSource) -> Flask:
    return create_app(source, token=TOKEN, clock=source.clock, token_hint="in the test's TOKEN")


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    """A test client that holds the console's cookie (as after a first visit with the token)."""
    client = app.test_client()
    client.set_cookie(COOKIE, TOKEN)
    return client


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("Debian's chromium is not installed: run `make setup`, which installs it for the browser tests")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def open_console(browser: Browser) -> Iterator[Callable[[Flask], BrowserConsole]]:
    """Serve an app and open it, logged in, in a fresh browser context; each one's problems fail the test."""
    opened: list[BrowserConsole] = []
    with ExitStack() as stack:

        def open_app(app: Flask) -> BrowserConsole:
            server = stack.enter_context(ConsoleServer(app))
            context = browser.new_context()
            stack.callback(context.close)
            context.set_default_timeout(EXPECT_TIMEOUT_MS)
            page = context.new_page()
            shown = BrowserConsole(page=page, url=server.url)
            page.on("console", lambda message: _keep_error(shown.problems, message))
            page.on("pageerror", lambda error: shown.problems.append(f"page error: {error}"))
            page.goto(f"{server.url}/?token={TOKEN}")
            opened.append(shown)
            return shown

        yield open_app
        problems = [problem for shown in opened for problem in shown.problems]
    assert problems == [], "the browser reported errors"


def _keep_error(problems: list[str], message: ConsoleMessage) -> None:
    if message.type == "error":
        problems.append(f"console error: {message.text}")


@pytest.fixture
def served(source: FakeSource, open_console: Callable[[Flask], BrowserConsole]) -> BrowserConsole:
    """The demo source's console in the browser."""
    return open_console(create_app(source, token=TOKEN, clock=source.clock))
