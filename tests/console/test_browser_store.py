"""The console in Debian's Chromium over the operator's source on DynamoDB Local (as ``punctual console`` builds it
for a running stack): the pages list what the table holds, and a cancel and a redrive made on the page change the
table itself."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fakes import TOKEN, BrowserConsole
from flask import Flask
from playwright.sync_api import expect

from punctual.domain.model import TaskStatus
from punctual.stores.dlq import FileDeadLetterQueue
from punctual.stores.dynamodb import DynamoStores
from punctual_tools.console.app import create_app
from punctual_tools.console.model import PAGE_SIZE
from punctual_tools.console.source import OperatorSource
from support import TaskFactory, make_failed, read_task

pytestmark = pytest.mark.integration  # on the session's DynamoDB Local

TIMEOUT_MS = 30_000  # generous: the machine may be busy; an assertion returns as soon as it holds


def serve(operator: OperatorSource, open_console: Callable[[Flask], BrowserConsole]) -> BrowserConsole:
    return open_console(create_app(operator, token=TOKEN, token_hint="in the test's TOKEN"))


def test_the_tasks_page_lists_the_tables_active_tasks_in_due_order_page_after_page(
    operator: OperatorSource, tasks: TaskFactory, now: int, open_console: Callable[[Flask], BrowserConsole]
) -> None:
    # Given 60 pending tasks due over the next minutes (more than a page), a second apart
    created = [tasks.create(now + 60_000 + i * 1_000, f"due-{i:03d}", now_ms=now).task_id for i in range(60)]
    served = serve(operator, open_console)
    # When the Tasks page is opened, then its next page
    page = served.open("/tasks")
    ids = page.locator("#tasks tbody td:first-child")
    # Then the first page holds the first PAGE_SIZE (50) in due order, and the next one the rest
    expect(ids).to_have_text(created[:PAGE_SIZE], timeout=TIMEOUT_MS)
    page.click("#next-page")
    expect(ids).to_have_text(created[PAGE_SIZE:], timeout=TIMEOUT_MS)


def test_a_cancel_made_on_the_page_changes_the_table(
    operator: OperatorSource,
    stores: DynamoStores,
    tasks: TaskFactory,
    now: int,
    open_console: Callable[[Flask], BrowserConsole],
) -> None:
    # Given a pending task in the table
    task = tasks.create(now + 600_000, "to-cancel", now_ms=now)
    served = serve(operator, open_console)
    # When it is cancelled from its page, through the confirmation
    page = served.open(f"/tasks/{task.task_id}")
    page.click("#cancel")
    expect(page.locator("h1")).to_have_text(f"Cancel task {task.task_id}?", timeout=TIMEOUT_MS)
    assert read_task(stores, task.task_id).status is TaskStatus.PENDING  # the confirmation changed nothing
    page.click("#confirm")
    # Then the page and the table say CANCELLED
    expect(page.locator("#task-status")).to_have_text("CANCELLED", timeout=TIMEOUT_MS)
    assert read_task(stores, task.task_id).status is TaskStatus.CANCELLED


def test_a_redrive_made_on_the_page_changes_the_table_and_the_dead_letters(
    operator: OperatorSource,
    stores: DynamoStores,
    tasks: TaskFactory,
    queue: FileDeadLetterQueue,
    now: int,
    open_console: Callable[[Flask], BrowserConsole],
) -> None:
    # Given two FAILED tasks with their dead letters
    for name in ("broken-1", "broken-2"):
        queue.send(make_failed(stores, tasks, name, now), f"{name}: connection refused")
    served = serve(operator, open_console)
    page = served.open("/dead-letters")
    letters = page.locator("#dead-letters tbody tr")
    expect(letters).to_have_count(2, timeout=TIMEOUT_MS)
    # When the first is checked and redriven, through the confirmation
    page.check("input[value='broken-1']")
    page.click("#redrive-checked")
    expect(page.locator("#selected li")).to_have_text(["broken-1"], timeout=TIMEOUT_MS)
    page.click("#confirm")
    # Then the page lists the other one only, and the table holds the first PENDING again, its letter gone
    expect(letters).to_have_count(1, timeout=TIMEOUT_MS)
    expect(letters.locator("td:nth-child(2)")).to_have_text(["broken-2"])
    assert read_task(stores, "broken-1").status is TaskStatus.PENDING
    assert read_task(stores, "broken-2").status is TaskStatus.FAILED
    assert {letter.task_id for letter in queue.receive()} == {"broken-2"}
