"""A tenant's source through the local REST API server (bearer tokens) over DynamoDB Local: its own tasks a page at a
time through the API's paging, the load ahead from its listing, its FAILED tasks as its dead letters, and its
changes through the API; no operator's views."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.domain.model import TaskStatus
from punctual.errors import PunctualError
from punctual.runtime.client import Client
from punctual.scheduling.api_client import ApiClient
from punctual.stores.dynamodb import DynamoStores
from punctual.targets import HttpAction
from punctual_tools.console.model import ConsoleSource, TaskFilter
from punctual_tools.console.source import TenantSource, api_source
from punctual_tools.doubles import FakeClock
from punctual_tools.local.api_server import LocalApi
from support import TaskFactory, make_failed, read_task, serving_api

pytestmark = pytest.mark.integration  # on the session's DynamoDB Local

TOKENS = {"token-acme": "acme", "token-beta": "beta"}


@pytest.fixture
def api(ddb_local_client: Any, settings: Settings, clock: FakeClock) -> Iterator[LocalApi]:
    with serving_api(ddb_local_client, settings, clock, TOKENS) as server:
        yield server


@pytest.fixture
def acme(api: LocalApi) -> TenantSource:
    return api_source(ApiClient(api.url, token="token-acme"), "acme")


def test_a_tenant_pages_through_its_own_tasks_only(acme: TenantSource, tasks: TaskFactory, now: int) -> None:
    # Given five tasks of acme's (one an http task) and two of beta's
    for i in range(4):
        tasks.create(now + 60_000, f"acme/t-{i}", now_ms=now)
    tasks.create(now + 60_000, "acme/t-4", now_ms=now, action=HttpAction(url="https://example.com/hook"))
    for i in range(2):
        tasks.create(now + 60_000, f"beta/t-{i}", now_ms=now)
    # When acme's console pages through its tasks, 2 a page
    pages = [acme.tasks(TaskFilter(limit=2), now)]
    while pages[-1].next_cursor is not None:
        assert len(pages) < 20
        pages.append(acme.tasks(TaskFilter(limit=2, after=pages[-1].next_cursor), now))
    # Then it saw its own five in id order, from the API, and none of beta's; and a kind filter holds
    assert [t.task_id for page in pages for t in page.tasks] == [f"t-{i}" for i in range(5)]
    assert all(page.index == "api" and len(page.tasks) <= 2 for page in pages)
    http = acme.tasks(TaskFilter(kind="http", limit=2), now)
    assert [t.task_id for t in http.tasks] == ["t-4"]


def test_a_tenants_now_page_counts_its_own_load_and_no_operator_figures(
    acme: TenantSource, tasks: TaskFactory, now: int
) -> None:
    # Given acme's tasks due 1.5 s and 10 s ahead and one 5 s overdue, and beta's due 1.5 s ahead
    tasks.create(now + 1_500, "acme/soon", now_ms=now)
    tasks.create(now + 10_000, "acme/later", now_ms=now)
    tasks.create(now - 5_000, "acme/late", now_ms=now)
    tasks.create(now + 1_500, "beta/soon", now_ms=now)
    # When acme's Now page is read
    view = acme.now(now, 60)
    # Then it counts acme's alone, and has no figures or executors (the operator's)
    assert (view.due_per_second[1], view.due_per_second[10], sum(view.due_per_second)) == (1, 1, 2)
    assert view.overdue == 1
    assert (view.minutes, view.executors) == ([], None)
    assert view.notes
    as_port: ConsoleSource = acme  # the port the pages read, implemented
    assert as_port.operator is False
    assert as_port.tenants() is None


def test_a_tenants_failed_tasks_are_its_dead_letters_and_redrive_through_the_api(
    acme: TenantSource, stores: DynamoStores, tasks: TaskFactory, now: int
) -> None:
    # Given a FAILED task of acme's and one of beta's
    make_failed(stores, tasks, "acme/broken", now)
    make_failed(stores, tasks, "beta/broken", now)
    # When acme's console lists its dead letters and redrives its own, beta's and a missing one
    letters = acme.dead_letters()
    outcome = acme.redrive(["broken", "missing"])
    # Then it saw its own failure with its detail, and only its own task became PENDING again
    assert [(letter.task_id, letter.reason) for letter in letters] == [("broken", "boom")]
    assert outcome.redriven == ["broken"]
    assert set(outcome.skipped) == {"missing"}
    assert read_task(stores, "acme/broken").status is TaskStatus.PENDING
    assert read_task(stores, "beta/broken").status is TaskStatus.FAILED


def test_a_tenants_changes_go_through_the_api(
    acme: TenantSource, stores: DynamoStores, tasks: TaskFactory, now: int
) -> None:
    tasks.create(now + 600_000, "acme/a", now_ms=now)
    tasks.create(now + 600_000, "acme/b", now_ms=now)
    acme.cancel("a")
    moved = acme.reschedule("b", now + 660_000)
    assert read_task(stores, "acme/a").status is TaskStatus.CANCELLED
    assert read_task(stores, "acme/b").due_ms == moved.due_ms == now + 660_000
    assert acme.task("b") is not None
    assert acme.task("nowhere") is None


def test_a_tenants_console_needs_the_rest_api(settings: Settings) -> None:
    with pytest.raises(PunctualError, match="REST API"):
        api_source(Client(settings), "acme")
