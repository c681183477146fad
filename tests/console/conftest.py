"""The console tier's fixtures: the app over a fake source and its test client, and a real browser.

* ``source``: :func:`fakes.demo_source`; ``app``: the console over it (token :data:`TOKEN`, the source's clock);
  ``client``: Flask's test client holding the console's cookie.
* ``browser``: Debian's Chromium driven by Playwright, one for the session (it fails, never skips, without it);
  ``open_console``: a function that serves any app (:class:`ConsoleServer`) and opens it in a new page of that
  browser, logged in with the token; another module passes an app over another source. Every page it opened must
  end with no console error, no uncaught script error and no Content-Security-Policy violation.

The console's sources over DynamoDB Local (the ``integration`` tests): ``operator``, the operator's source as
``local_source`` builds it from a state file written as a running local stack writes it, over a fresh table in the
session's DynamoDB Local (its dead-letter queue and batch log in the test's own home), and a store and a client
(``scene_client``) on the same table to set the scene with.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from fakes import TOKEN, BrowserConsole, FakeSource, demo_source
from flask import Flask
from flask.testing import FlaskClient
from playwright.sync_api import Browser, ConsoleMessage

from punctual.config.settings import Settings
from punctual.config.tenant_map import TenantMap
from punctual.domain.clock import Clock
from punctual.scheduling.client import Client
from punctual.stores.dlq import FileDeadLetterQueue, file_queue_url
from punctual.stores.dynamodb import DynamoStores
from punctual_tools.console.app import COOKIE, create_app
from punctual_tools.console.browser import NoChromiumError, chromium
from punctual_tools.console.figures import BATCH_LOG, BatchLog
from punctual_tools.console.server import ConsoleServer
from punctual_tools.console.source import OperatorSource, local_source
from support import FakeClock, TaskFactory, now_ms

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
    """Debian's Chromium for the session: the test fails, never skips, without it."""
    try:
        with chromium() as launched:
            yield launched
    except NoChromiumError as exc:
        pytest.fail(str(exc))


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


# -- the operator's source over DynamoDB Local ----------------------------------------------------------------
SHARDS = 4
TENANTS = ("local", "acme", "beta")
# acme's quotas set apart, so that the Tenants page's limits are seen to come from the map
TENANT_MAP = json.dumps(
    {"tenants": {"acme": {"targets": ["127.0.0.1:9"], "quotas": {"active_tasks": 10, "schedules": 3}}}}
)


@pytest.fixture
def now() -> int:
    """The instant the test's scene is set at: now by the wall clock (the operator's client uses the real clock),
    whole, so that the histograms' seconds are exact."""
    return now_ms()


@pytest.fixture
def home(tmp_path: Path, ddb_local: str, local_table: str) -> Path:
    """A local stack's home whose state file names the test's table, as a running stack writes it."""
    state = {
        "ready": True,
        "pid": os.getpid(),  # a process that runs: the stack's, as far as the source can tell
        "endpoint_url": ddb_local,
        "table_name": local_table,
        "shard_count": SHARDS,
        "dead_letter_queue_url": file_queue_url(tmp_path / "dlq.jsonl"),
        "batch_log": str(tmp_path / BATCH_LOG),
        "tenants": list(TENANTS),
        "tenant_map": TENANT_MAP,
    }
    (tmp_path / "stack.json").write_text(json.dumps(state))
    return tmp_path


@pytest.fixture
def settings(home: Path, ddb_local: str, local_table: str) -> Settings:
    """The settings of the scene's own client (no tenant rules get in the way of setting it)."""
    return Settings(
        table_name=local_table,
        endpoint_url=ddb_local,
        shard_count=SHARDS,
        ntp_server=None,
        db_threads=4,
        tenant_map=TENANT_MAP,
        dead_letter_queue_url=file_queue_url(home / "dlq.jsonl"),
    )


@pytest.fixture
def operator(home: Path) -> Iterator[OperatorSource]:
    """The console's operator operator, as ``punctual console`` builds it for the stack at ``home``."""
    built = local_source(home)
    try:
        yield built
    finally:
        assert isinstance(built.stores, DynamoStores)
        built.stores.table.close()


@pytest.fixture
def stores(ddb_local_client: Any, settings: Settings) -> Iterator[DynamoStores]:
    """A store on the scene's table, to set the scene with."""
    built = DynamoStores.from_settings(ddb_local_client, settings)
    try:
        yield built
    finally:
        built.table.close()


@pytest.fixture
def tasks(stores: DynamoStores) -> TaskFactory:
    return TaskFactory(stores)


@pytest.fixture
def clock(now: int) -> FakeClock:
    return FakeClock(wall_ms=now)


@pytest.fixture
def scene_client(stores: DynamoStores, settings: Settings, clock: Clock) -> Client:
    """A client of the scene's table at ``now``."""
    return Client(settings, stores.client, stores.schedules, clock=clock, tenant_map=TenantMap.parse(TENANT_MAP))


@pytest.fixture
def queue(home: Path) -> FileDeadLetterQueue:
    """The stack's dead-letter queue (the file its state names)."""
    return FileDeadLetterQueue(home / "dlq.jsonl")


@pytest.fixture
def batch_log(home: Path) -> BatchLog:
    """The stack's batch log (the file its state names)."""
    return BatchLog(home / BATCH_LOG)
