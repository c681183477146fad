"""The console's pages over the fake source, through Flask's test client: what each shows, the token, the security
headers, bad input answered as the REST API answers it, and one source call per view."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any, cast

import pytest
from fakes import PENDING_COUNT, TOKEN, FakeSource
from flask import Flask
from flask.testing import FlaskClient

from punctual.api import build_app
from punctual.config.tenant_map import TenantMap
from punctual.domain.keys import from_ms
from punctual.domain.model import Task
from punctual.errors import ApiError, PunctualError, QuotaExceededError, ScheduleStateError, WireError
from punctual.scheduling.client import Client
from punctual.targets import LogAction
from punctual_tools.console.app import CONTENT_SECURITY_POLICY, COOKIE, create_app, problem_of
from punctual_tools.console.model import PAGE_SIZE as CONSOLE_PAGE_SIZE
from punctual_tools.local.api_server import proxy_event


def text(answer: Any) -> str:
    return str(answer.get_data(as_text=True))


def error_message(answer: Any) -> str:
    found = re.search(r'id="error-message">([^<]*)<', text(answer))
    assert found is not None, text(answer)
    return found.group(1).replace("&#39;", "'").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


# -- each page ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/", ["<h1>Now</h1>", 'id="due-total"', "executor-a", "figures of the fake source", "<svg"]),
        ("/tasks", ["<h1>Tasks</h1>", "acme/pending-000", "Read from the <strong>due</strong> index"]),
        ("/tasks/acme/failed-0", ["HTTP 500 from target 0", 'id="timeline"', "acme/failed-0:0"]),
        ("/schedules", ["acme/daily", "cron(0 9 * * ? *)", "Europe/Paris", "ACTIVE"]),
        ("/schedules/acme/daily", ["Next 10 occurrences", "acme/daily@", "3.0 ms"]),
        ("/dead-letters", ["acme/failed-0", "HTTP 500 from target 2", 'type="checkbox"', "retrying=1"]),
        ("/tenants", ["acme", "<meter", "no limit"]),
    ],
)
def test_each_page_renders_its_content_in_the_shared_layout(
    client: FlaskClient, path: str, expected: list[str]
) -> None:
    # When the page is asked for with the console's cookie
    answer = client.get(path)
    # Then it renders with its content, the source's label and the nav
    assert answer.status_code == 200
    page = text(answer)
    for fragment in [*expected, "fake source &lt;in memory&gt;", 'href="/dead-letters"', 'href="/tenants"']:
        assert fragment in page, fragment
    assert "read-only" not in page


def test_the_now_page_holds_three_charts_and_the_live_fragment_alone_is_swappable(client: FlaskClient) -> None:
    page = text(client.get("/"))
    assert page.count("<svg") == 3
    assert 'data-live="/now/live"' in page
    assert '<script src="/static/console.js" defer></script>' in page
    # The fragment is the same figures without the layout
    fragment = text(client.get("/now/live"))
    assert fragment.count("<svg") == 3
    assert "<nav>" not in fragment
    assert "<html" not in fragment


def test_the_live_fragment_shows_what_the_source_now_holds(client: FlaskClient, source: FakeSource) -> None:
    before = text(client.get("/now/live"))
    assert f"{PENDING_COUNT + 2} due in the next 300 s" in before
    # When a task is added due in 3 s
    source.add(Task(task_id="acme/new", due_at=from_ms(source.now_ms + 3_000), action=LogAction()))
    # Then the next fragment counts it
    assert f"{PENDING_COUNT + 3} due in the next 300 s" in text(client.get("/now/live"))


def test_a_tenant_view_says_what_it_cannot_show(source: FakeSource) -> None:
    source.is_operator = False
    client = create_app(source, token=TOKEN, clock=source.clock).test_client()
    client.set_cookie(COOKIE, TOKEN)
    assert "Only the operator sees tenants." in text(client.get("/tenants"))
    assert "Only the operator sees the executors." in text(client.get("/"))


def test_a_task_page_shows_its_payload_as_escaped_json(client: FlaskClient, source: FakeSource) -> None:
    source.add(
        Task(
            task_id="acme/hostile",
            due_at=from_ms(source.now_ms + 60_000),
            action=LogAction(message="<b>hi</b>"),
            payload={"html": "<script>alert(1)</script>", "n": [1, 2]},
        )
    )
    page = text(client.get("/tasks/acme/hostile"))
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;hi&lt;/b&gt;" in page
    assert "&#34;n&#34;: [\n    1," in page  # indented JSON


def test_a_schedule_page_shows_its_next_ten_occurrences_in_its_zone_and_in_utc(client: FlaskClient) -> None:
    # Given a schedule at 09:00 in Paris, and the clock on 2030-06-01 at 12:00:20 UTC (summer time: +02:00)
    page = text(client.get("/schedules/acme/daily"))
    rows = re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td></tr>", page)
    assert len(rows) == 10
    assert rows[0] == ("2030-06-02T09:00:00+02:00 CEST", "2030-06-02T07:00:00.000Z")
    assert rows[9] == ("2030-06-11T09:00:00+02:00 CEST", "2030-06-11T07:00:00.000Z")


# -- the token ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/", "/now/live", "/tasks", "/tasks/acme/failed-0", "/static/console.js"])
def test_without_the_token_every_request_is_a_401_saying_where_it_is(app: Flask, path: str) -> None:
    anonymous = app.test_client()
    answer = anonymous.get(path)
    assert answer.status_code == 401
    assert "in the test&#39;s TOKEN" in text(answer)
    assert "acme" not in text(answer)  # nothing of the source, not even its label
    assert "fake source" not in text(answer)
    # A wrong cookie or a wrong token in the address is no better
    anonymous.set_cookie(COOKIE, TOKEN + "x")
    assert anonymous.get(path).status_code == 401
    assert anonymous.get(f"{path}?token=wrong").status_code == 401


def test_a_first_visit_with_the_token_sets_a_strict_cookie_and_drops_the_token_from_the_address(app: Flask) -> None:
    visitor = app.test_client()
    # When the console is opened with its token in the address (and a filter)
    answer = visitor.get(f"/tasks?status=FAILED&token={TOKEN}")
    # Then it redirects to the same address without the token, setting the cookie
    assert answer.status_code == 303
    assert answer.headers["Location"] == "/tasks?status=FAILED"
    cookie = answer.headers["Set-Cookie"]
    assert cookie.startswith(f"{COOKIE}={TOKEN};")
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    # And the cookie opens every page afterwards
    assert visitor.get("/tasks?status=FAILED").status_code == 200


def test_every_answer_carries_the_security_headers(client: FlaskClient, app: Flask) -> None:
    for answer in (client.get("/"), client.get("/static/console.css"), app.test_client().get("/")):
        assert answer.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
        assert answer.headers["X-Frame-Options"] == "DENY"
    assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY
    assert CONTENT_SECURITY_POLICY.startswith("default-src 'self';")
    # No inline script or style anywhere in a page
    page = text(client.get("/tasks/acme/failed-0"))
    assert "<script>" not in page
    assert "style=" not in page


# -- the Tasks page's form ---------------------------------------------------------------------------------------
def test_the_filter_form_reaches_the_source_and_shows_its_answer(client: FlaskClient, source: FakeSource) -> None:
    answer = client.get(
        "/tasks?status=FAILED&tenant=acme&due_from=2030-06-01T11:40&due_to=2030-06-01T11:49:30Z&kind=log"
    )
    page = text(answer)
    assert answer.status_code == 200
    assert re.findall(r"<code>(acme/[^<]*)</code>", page) == ["acme/failed-2", "acme/failed-1"]
    assert '<option value="FAILED" selected>' in page
    assert 'value="2030-06-01T11:40:00"' in page  # the form shows what it filtered by
    assert "Read from the <strong>tenant</strong> index" in page


def test_next_page_follows_the_sources_cursor_with_the_same_filter(client: FlaskClient) -> None:
    first = text(client.get("/tasks?status=PENDING"))
    ids = re.findall(r"<code>((?:acme|beta)/[^<]*)</code>", first)
    assert len(ids) == CONSOLE_PAGE_SIZE
    found = re.search(r'<a href="([^"]*)" id="next-page"', first)
    assert found is not None
    next_url = found.group(1).replace("&amp;", "&")
    assert "status=PENDING" in next_url
    second = text(client.get(next_url))
    rest = re.findall(r"<code>((?:acme|beta)/[^<]*)</code>", second)
    assert not set(rest) & set(ids)
    assert len(ids) + len(rest) == PENDING_COUNT + 1  # acme's and beta's PENDING tasks, each once
    assert 'id="next-page"' not in second


def test_a_searched_id_opens_its_task_and_an_unknown_one_is_the_apis_404(client: FlaskClient) -> None:
    found = client.get("/tasks?id=acme/failed-1")
    assert (found.status_code, found.headers["Location"]) == (303, "/tasks/acme/failed-1")
    missing = client.get("/tasks?id=acme/nothing")
    assert (missing.status_code, error_message(missing)) == (404, "no task 'acme/nothing'")


# -- bad input ---------------------------------------------------------------------------------------------------
def no_client() -> Client:
    """A stand-in the API's service is built with and never uses: the query's error comes first."""
    return cast(Client, object())


def api_answer(path: str) -> tuple[int, str]:
    """What the REST API answers a GET of ``path`` (validation comes before any store call, so no store is set)."""
    api = build_app(no_client, TenantMap())
    context: Any = None
    answer = api.resolve(proxy_event("GET", path, {}, None, "acme"), context)
    return answer["statusCode"], json.loads(answer["body"])["detail"]


@pytest.mark.parametrize(
    ("query", "api_query"),
    [
        ("status=NOPE", "status=NOPE"),
        ("due_from=2030-13-01T00:00Z", "due_from=2030-13-01T00:00Z"),
        ("due_to=9999-12-31T23:59-01:00", "due_to=9999-12-31T23:59-01:00"),
    ],
)
def test_bad_filter_input_gets_the_rest_apis_status_and_message(
    client: FlaskClient, source: FakeSource, query: str, api_query: str
) -> None:
    answer = client.get(f"/tasks?{query}")
    status, detail = api_answer(f"/v1/tasks?{api_query}")
    # (the API takes a list of statuses, so it names the first one "status.0"; the console's form takes one)
    assert (answer.status_code, error_message(answer)) == (status, detail.replace("status.0:", "status:"))
    assert source.calls == []  # the source was not asked


def test_a_filter_by_an_unknown_action_kind_is_a_422_naming_the_field(client: FlaskClient) -> None:
    answer = client.get("/tasks?kind=carrier-pigeon")
    assert answer.status_code == 422
    assert error_message(answer).startswith("invalid kind: unknown action kind 'carrier-pigeon'")


@pytest.mark.parametrize(
    ("path", "message"),
    [("/tasks/acme/none", "no task 'acme/none'"), ("/schedules/acme/none", "no schedule 'acme/none'")],
)
def test_an_unknown_task_or_schedule_is_the_apis_404(client: FlaskClient, path: str, message: str) -> None:
    answer = client.get(path)
    assert (answer.status_code, error_message(answer)) == (404, message)


@pytest.mark.parametrize(
    ("error", "status", "message"),
    [
        (
            QuotaExceededError("active_tasks", 10, "11 active tasks"),
            429,
            "11 active tasks, past the tenant's quota of 10 (active_tasks)",
        ),
        (ScheduleStateError("acme/d", "resume", "it is ENDED"), 409, "cannot resume schedule 'acme/d': it is ENDED"),
        (ApiError(403, "the signature does not match"), 403, "403: the signature does not match"),
        (ApiError(0, "connection refused"), 502, "0: connection refused"),
        (WireError("the answer broke off"), 500, "internal error (WireError): the answer broke off"),
    ],
)
def test_each_error_gets_the_apis_status_and_message(error: PunctualError, status: int, message: str) -> None:
    assert problem_of(error) == (status, message)


def test_an_unknown_page_is_a_404_page(client: FlaskClient) -> None:
    assert client.get("/nowhere").status_code == 404


# -- reads ---------------------------------------------------------------------------------------------------------
def test_the_tenants_page_shows_a_count_being_made_and_one_that_failed_and_follows_them_live(
    client: FlaskClient, source: FakeSource
) -> None:
    # Given acme's first count not done yet and beta's last one failed (its last value kept, 45 s old)
    assert source.usages is not None
    acme, beta = source.usages
    source.usages = [
        replace(acme, active_tasks=None, counting=True),
        replace(beta, active_tasks=4, counted_s_ago=45.2, count_error="ClientError: throttled"),
    ]
    # When the page is read  Then acme's shows as counting, beta's with its age and why the last count failed; the
    # table is the page's live part
    page = text(client.get("/tenants"))
    assert "counting…" in page
    assert "counted 45 s ago" in page
    assert "the last count failed: ClientError: throttled" in page
    assert 'data-live="/tenants/live"' in page
    # When acme's count is done  Then the live part shows it
    source.usages[0] = replace(acme, active_tasks=12, counting=False, counted_s_ago=0.4)
    live = text(client.get("/tenants/live"))
    assert "counting…" not in live
    assert "12 of 1000" in live


@pytest.mark.parametrize(
    ("path", "calls"),
    [
        ("/", ["now"]),
        ("/now/live", ["now"]),
        ("/tasks?status=PENDING", ["tasks"]),
        ("/tasks/acme/pending-003", ["task"]),
        ("/schedules", ["schedules"]),
        ("/schedules/acme/daily", ["schedule", "occurrences"]),
        ("/dead-letters", ["dead_letters"]),
        ("/tenants", ["tenants"]),
        ("/tenants/live", ["tenants"]),
    ],
)
def test_a_page_reads_each_view_with_one_call_of_the_source(
    client: FlaskClient, source: FakeSource, path: str, calls: list[str]
) -> None:
    assert client.get(path).status_code == 200
    assert source.calls == calls
