"""Fixtures shared by every test tier, and the tier markers.

* Tests under ``tests/integration`` are marked ``integration``, those under ``tests/e2e`` ``e2e`` and those
  under ``tests/contract`` ``contract`` (its DynamoDB Local params also ``integration``), so
  ``pytest -m "not integration and not e2e"`` runs only the fast tiers.
* Outside the deployed-stack suite every AWS credential in the environment is replaced by a dummy.
* DynamoDB Local is started once per session, and only if a test asks for ``ddb_local`` (or a fixture built
  on it); the first such test pays its ~2 s start-up.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.session
import pytest

# Set before boto3 or moto build any client, so that no test reaches real AWS by mistake (a test that forgot
# its moto mock fails on dummy credentials instead of touching an account). Only the deployed-stack suite
# (marker ``aws``, enabled by AWS_SAM_STACK_NAME) keeps the developer's real credentials.
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
if not os.environ.get("AWS_SAM_STACK_NAME"):
    for _name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN", "AWS_SESSION_TOKEN"):
        os.environ[_name] = "testing"
    os.environ.pop("AWS_PROFILE", None)

from punctual_tools.local.dynamodb_local import make_client
from punctual_tools.template import ensure_table
from support import running_dynamodb_local

# One loader of botocore's data (service models, endpoints) for every session this process makes: moto's mock_aws
# drops boto3's default session at each start, and a new session parses the models again (about 150 ms a client,
# paid by each of the tests that make one); parsed once, a client takes about 20 ms. The data is the same files
# either way, read only.
botocore.session.create_loader = functools.lru_cache(maxsize=None)(botocore.session.create_loader)

TESTS_DIR = Path(__file__).resolve().parent
EXIT_WATCHDOG_S = 120
TIER_MARKERS = {"integration": "integration", "e2e": "e2e", "contract": "contract"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow",
        action="store_true",
        default=False,
        help="also run the scenarios marked slow (make faults and make slow do; make test does not)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier, taken from the first directory below ``tests/``; without ``--slow``, skip
    the scenarios marked ``slow`` (a minute or more each: ``make faults`` runs them)."""
    skip_slow = (
        None
        if config.getoption("--slow")
        else pytest.mark.skip(reason="slow scenario: make slow runs it (make faults too, for the fault suite's)")
    )
    for item in items:
        if skip_slow is not None and item.get_closest_marker("slow") is not None:
            item.add_marker(skip_slow)
        try:
            tier = Path(item.path).resolve().relative_to(TESTS_DIR).parts[0]
        except ValueError:
            continue
        marker = TIER_MARKERS.get(tier)
        if marker is not None:
            item.add_marker(getattr(pytest.mark, marker))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The session is over: if a thread left running keeps the interpreter from exiting (Python joins the
    threads of every thread pool at exit), print every thread's stack and exit with status 1 after 120 s,
    instead of hanging until CI's own limit with nothing said."""
    if sys.__stderr__ is not None:  # None only in an interpreter started without a stderr
        faulthandler.dump_traceback_later(EXIT_WATCHDOG_S, exit=True, file=sys.__stderr__)


@pytest.fixture(autouse=True)
def _close_executors(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Close every executor a test builds when the test ends, before the fixtures it was built from (its moto
    mock, its table, its target) are torn down: its threads (dispatcher, workers, heartbeat, recorder, event
    loop) would otherwise live on for the rest of the session, and a heartbeat left renewing after its moto
    mock ended would call real AWS."""
    from punctual.executing.executor import Executor  # noqa: PLC0415 - loaded by the first test, after every tier's conftest set its environment

    init = Executor.__init__

    def tracked(self: Executor, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        request.node.addfinalizer(self.close)  # added last, run first: before the test's fixtures are torn down

    monkeypatch.setattr(Executor, "__init__", tracked)


@pytest.fixture(scope="session")
def ddb_local() -> Iterator[str]:
    """The endpoint URL of one in-memory DynamoDB Local shared by the whole session."""
    with running_dynamodb_local() as endpoint:
        yield endpoint


@pytest.fixture
def ddb_local_client(ddb_local: str) -> Any:
    """A low-level DynamoDB client for the session's DynamoDB Local."""
    return make_client(ddb_local)


@pytest.fixture
def fresh_table_name() -> str:
    """A table name no other test uses, so tests sharing one DynamoDB Local never see each other's items."""
    return f"punctual-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def local_table(ddb_local_client: Any, fresh_table_name: str) -> Iterator[str]:
    """A Tasks table built from template.yaml in the session's DynamoDB Local; deleted afterwards."""
    ensure_table(ddb_local_client, fresh_table_name)
    try:
        yield fresh_table_name
    finally:
        with contextlib.suppress(ddb_local_client.exceptions.ResourceNotFoundException):
            ddb_local_client.delete_table(TableName=fresh_table_name)
