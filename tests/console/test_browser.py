"""The console in a real browser (Debian's Chromium through Playwright) over the fake source: each page renders with
no script error and no Content-Security-Policy violation (the ``open_console`` fixture fails the test on any), the
filters and the next page work, a cancel and a redrive made from the pages change the source, and the Now page's
figures update without a reload."""

from __future__ import annotations

import re

import pytest
from fakes import PENDING_COUNT, BrowserConsole, FakeSource
from playwright.sync_api import expect

from punctual.domain.keys import from_ms
from punctual.domain.model import Task, TaskStatus
from punctual.targets import LogAction
from punctual_tools.console.model import PAGE_SIZE

TIMEOUT_MS = 30_000  # generous: the machine may be busy; each expectation returns as soon as it holds


@pytest.mark.parametrize(
    ("path", "heading"),
    [
        ("/", "Now"),
        ("/tasks", "Tasks"),
        ("/tasks/acme/failed-0", "Task acme/failed-0"),
        ("/schedules", "Schedules"),
        ("/schedules/acme/daily", "Schedule acme/daily"),
        ("/dead-letters", "Dead letters"),
        ("/tenants", "Tenants"),
        ("/change/cancel/acme/pending-001", "Cancel task acme/pending-001?"),
    ],
)
def test_each_page_renders_in_the_browser_without_errors(served: BrowserConsole, path: str, heading: str) -> None:
    page = served.open(path)
    expect(page.locator("h1")).to_have_text(heading, timeout=TIMEOUT_MS)
    expect(page.locator("header .source")).to_have_text("fake source <in memory>")
    # The style sheet applied (a CSS rule of the sheet, which the policy allows from the console itself)
    assert page.locator("header").evaluate("e => getComputedStyle(e).display") == "flex"


def test_the_now_page_draws_its_charts(served: BrowserConsole) -> None:
    page = served.open("/")
    expect(page.locator("svg.chart")).to_have_count(3, timeout=TIMEOUT_MS)
    expect(page.locator("svg.chart.due rect.bar")).to_have_count(300)
    expect(page.locator("#executors tbody tr")).to_have_count(1)


def test_the_filters_and_the_next_page_work(served: BrowserConsole) -> None:
    page = served.open("/tasks")
    rows = page.locator("#tasks tbody tr")
    expect(rows).to_have_count(PAGE_SIZE, timeout=TIMEOUT_MS)
    # When the form filters FAILED tasks of acme
    page.select_option("select[name=status]", "FAILED")
    page.fill("input[name=tenant]", "acme")
    page.click("#task-filter button[type=submit]")
    # Then the table holds those three
    expect(rows).to_have_count(3, timeout=TIMEOUT_MS)
    expect(page.locator("#tasks tbody td.status")).to_have_text(["FAILED"] * 3)
    # When the PENDING tasks are listed and the next page followed
    page.select_option("select[name=status]", "PENDING")
    page.fill("input[name=tenant]", "")
    page.click("#task-filter button[type=submit]")
    expect(rows).to_have_count(PAGE_SIZE, timeout=TIMEOUT_MS)
    first = rows.locator("td:first-child").all_inner_texts()
    page.click("#next-page")
    # Then the rest of them are shown, none twice, with no next page
    expect(rows).to_have_count(PENDING_COUNT + 1 - PAGE_SIZE, timeout=TIMEOUT_MS)
    second = rows.locator("td:first-child").all_inner_texts()
    assert not set(first) & set(second)
    expect(page.locator("#next-page")).to_have_count(0)
    # And the search by id opens a task's page
    page.fill("input[name=id]", "acme/done-1")
    page.click("#task-search button[type=submit]")
    expect(page.locator("h1")).to_have_text("Task acme/done-1", timeout=TIMEOUT_MS)


def test_a_cancel_from_the_task_page_through_its_confirmation_changes_the_table(
    served: BrowserConsole, source: FakeSource
) -> None:
    page = served.open("/tasks/acme/pending-002")
    page.click("#cancel")
    expect(page.locator("h1")).to_have_text("Cancel task acme/pending-002?", timeout=TIMEOUT_MS)
    assert source.status_of("acme/pending-002") is TaskStatus.PENDING  # the confirmation changed nothing
    page.click("#confirm")
    expect(page.locator("#task-status")).to_have_text("CANCELLED", timeout=TIMEOUT_MS)
    expect(page.locator(".messages")).to_have_text("task acme/pending-002 is CANCELLED")
    assert source.status_of("acme/pending-002") is TaskStatus.CANCELLED
    # And the Tasks page lists it CANCELLED
    served.open("/tasks?status=CANCELLED")
    expect(page.locator("#tasks tbody td:first-child")).to_have_text(["acme/pending-002"], timeout=TIMEOUT_MS)


def test_a_redrive_of_checked_dead_letters_changes_the_list(served: BrowserConsole, source: FakeSource) -> None:
    page = served.open("/dead-letters")
    letters = page.locator("#dead-letters tbody tr")
    expect(letters).to_have_count(3, timeout=TIMEOUT_MS)
    page.check("input[value='acme/failed-0']")
    page.check("input[value='acme/failed-2']")
    page.click("#redrive-checked")
    expect(page.locator("#selected li")).to_have_text(["acme/failed-0", "acme/failed-2"], timeout=TIMEOUT_MS)
    page.click("#confirm")
    expect(page.locator(".messages li")).to_have_text(
        ["redriven (2): acme/failed-0, acme/failed-2"], timeout=TIMEOUT_MS
    )
    expect(letters).to_have_count(1)
    expect(letters.locator("td:nth-child(2)")).to_have_text(["acme/failed-1"])
    assert source.status_of("acme/failed-0") is TaskStatus.PENDING


def test_the_now_pages_figures_update_without_a_reload(served: BrowserConsole, source: FakeSource) -> None:
    page = served.open("/")
    due_total = page.locator("#due-total")
    expect(due_total).to_have_text(f"{PENDING_COUNT + 2} due in the next 300 s", timeout=TIMEOUT_MS)
    page.evaluate("window.consoleMarker = 'same page'")
    # When two tasks become due within the next minutes
    for n in range(2):
        source.add(Task(task_id=f"acme/live-{n}", due_at=from_ms(source.now_ms + 4_000), action=LogAction()))
    # Then the figure changes on the page, which was not loaded again
    expect(due_total).to_have_text(f"{PENDING_COUNT + 4} due in the next 300 s", timeout=TIMEOUT_MS)
    assert page.evaluate("window.consoleMarker") == "same page"
    assert re.fullmatch(r"\d+", page.locator("#live").get_attribute("data-updated") or "")
