"""The console's changes over the fake source: a confirmation page first, then a POST with the CSRF token that really
changes the source and redirects with a message; refused without the CSRF token, in read-only mode, or when the
source refuses (the API's status and message), each time with nothing changed."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fakes import TOKEN, FakeSource
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.datastructures import MultiDict

from punctual.domain.keys import to_ms
from punctual.domain.model import TaskStatus
from punctual.domain.schedules import ScheduleState
from punctual_tools.console.app import COOKIE, CSRF_FIELD, create_app

PENDING = "acme/pending-004"
SCHEDULE = "acme/daily"


def text(answer: Any) -> str:
    return str(answer.get_data(as_text=True))


def csrf_of(page: str) -> str:
    found = re.search(rf'name="{CSRF_FIELD}" value="([^"]+)"', page)
    assert found is not None, page
    return found.group(1)


def error_message(answer: Any) -> str:
    found = re.search(r'id="error-message">([^<]*)<', text(answer))
    assert found is not None, text(answer)
    return found.group(1).replace("&#39;", "'")


def snapshot(source: FakeSource) -> tuple[dict[str, Any], dict[str, Any]]:
    return dict(source.tasks_by_id), dict(source.schedules_by_id)


CHANGES = [
    ("/change/cancel/" + PENDING, {}),
    ("/change/reschedule/" + PENDING, {"due_at": "2030-06-01T13:00"}),
    ("/change/run-now/" + PENDING, {}),
    ("/change/pause/" + SCHEDULE, {}),
    ("/change/run-schedule-now/" + SCHEDULE, {}),
    ("/change/delete/" + SCHEDULE, {}),
    ("/change/redrive", {"task_id": "acme/failed-0"}),
]


# -- confirmation, then the change ---------------------------------------------------------------------------------
def test_a_cancel_is_confirmed_on_a_page_then_made_by_its_post(client: FlaskClient, source: FakeSource) -> None:
    # Given the task page offers a cancel that leads to a confirmation page
    assert f'href="/change/cancel/{PENDING}"' in text(client.get(f"/tasks/{PENDING}"))
    confirm = client.get(f"/change/cancel/{PENDING}")
    page = text(confirm)
    assert confirm.status_code == 200
    assert "Cancel task <code>acme/pending-004</code>?" in page
    assert "The task is <strong>PENDING</strong>" in page
    assert f'<form method="post" action="/change/cancel/{PENDING}">' in page
    assert source.status_of(PENDING) is TaskStatus.PENDING  # asking changed nothing
    # When the confirming form is posted
    done = client.post(f"/change/cancel/{PENDING}", data={CSRF_FIELD: csrf_of(page)})
    # Then the task is cancelled, and the answer leads back to its page with a message
    assert (done.status_code, done.headers["Location"]) == (303, f"/tasks/{PENDING}")
    assert source.status_of(PENDING) is TaskStatus.CANCELLED
    after = text(client.get(f"/tasks/{PENDING}"))
    assert f"task {PENDING} is CANCELLED" in after
    assert 'id="task-status">CANCELLED' in after


def test_a_reschedule_names_the_new_instant_and_moves_the_task(client: FlaskClient, source: FakeSource) -> None:
    confirm = text(client.get(f"/change/reschedule/{PENDING}?due_at=2030-06-01T13:00:05"))
    assert "New due: <strong>2030-06-01T13:00:05.000Z</strong>" in confirm
    assert 'name="due_at" value="2030-06-01T13:00:05"' in confirm
    done = client.post(
        f"/change/reschedule/{PENDING}", data={CSRF_FIELD: csrf_of(confirm), "due_at": "2030-06-01T13:00:05"}
    )
    assert done.status_code == 303
    assert source.tasks_by_id[PENDING].due_ms == to_ms(source.tasks_by_id[PENDING].due_at)
    assert source.tasks_by_id[PENDING].due_at.isoformat() == "2030-06-01T13:00:05+00:00"


def test_run_now_makes_the_task_due_at_the_clocks_now(client: FlaskClient, source: FakeSource) -> None:
    csrf = csrf_of(text(client.get(f"/change/run-now/{PENDING}")))
    assert client.post(f"/change/run-now/{PENDING}", data={CSRF_FIELD: csrf}).status_code == 303
    assert source.tasks_by_id[PENDING].due_ms == source.now_ms


@pytest.mark.parametrize(
    ("change", "state"),
    [("pause", ScheduleState.PAUSED), ("delete", ScheduleState.DELETED)],
)
def test_a_schedule_change_is_made_and_shown_on_its_page(
    client: FlaskClient, source: FakeSource, change: str, state: ScheduleState
) -> None:
    csrf = csrf_of(text(client.get(f"/change/{change}/{SCHEDULE}")))
    done = client.post(f"/change/{change}/{SCHEDULE}", data={CSRF_FIELD: csrf})
    assert (done.status_code, done.headers["Location"]) == (303, f"/schedules/{SCHEDULE}")
    assert source.schedules_by_id[SCHEDULE].state is state
    assert f"schedule {SCHEDULE} is {state}" in text(client.get(f"/schedules/{SCHEDULE}"))


def test_resume_after_pause_and_run_now_make_an_occurrence(client: FlaskClient, source: FakeSource) -> None:
    csrf = csrf_of(text(client.get(f"/change/pause/{SCHEDULE}")))
    client.post(f"/change/pause/{SCHEDULE}", data={CSRF_FIELD: csrf})
    assert 'id="resume"' in text(client.get(f"/schedules/{SCHEDULE}"))
    client.post(f"/change/resume/{SCHEDULE}", data={CSRF_FIELD: csrf})
    assert source.schedules_by_id[SCHEDULE].state is ScheduleState.ACTIVE
    # Run now: one more occurrence, due now
    before = {t for t in source.tasks_by_id if t.startswith(f"{SCHEDULE}@")}
    client.post(f"/change/run-schedule-now/{SCHEDULE}", data={CSRF_FIELD: csrf})
    made = {t for t in source.tasks_by_id if t.startswith(f"{SCHEDULE}@")} - before
    assert [source.tasks_by_id[t].due_ms for t in made] == [source.now_ms]


def test_a_redrive_of_checked_dead_letters_lists_them_then_reports_each_outcome(
    client: FlaskClient, source: FakeSource
) -> None:
    # Given two dead letters and a task that is no longer FAILED are checked
    chosen = ["acme/failed-0", "acme/failed-2", PENDING]
    confirm = client.get("/change/redrive", query_string=[("task_id", t) for t in chosen])
    page = text(confirm)
    assert "Redrive 3 tasks?" in page
    assert all(f"<li><code>{t}</code></li>" in page for t in chosen)
    assert source.status_of("acme/failed-0") is TaskStatus.FAILED
    # When the redrive is confirmed
    form = [(CSRF_FIELD, csrf_of(page))] + [("task_id", t) for t in chosen]
    done = client.post("/change/redrive", data=MultiDict(form))
    # Then the FAILED ones are PENDING again, the other skipped, and the Dead letters page says so
    assert (done.status_code, done.headers["Location"]) == (303, "/dead-letters")
    assert source.status_of("acme/failed-0") is TaskStatus.PENDING
    assert source.status_of("acme/failed-2") is TaskStatus.PENDING
    after = text(client.get("/dead-letters"))
    assert "redriven (2): acme/failed-0, acme/failed-2" in after
    assert f"skipped {PENDING}: not FAILED" in after
    assert re.findall(r'value="(acme/failed-\d)"', after) == ["acme/failed-1"]


def test_a_redrive_of_nothing_checked_is_a_422(client: FlaskClient, source: FakeSource) -> None:
    answer = client.get("/change/redrive")
    assert (answer.status_code, error_message(answer)) == (422, "invalid task_id: check at least one task to redrive")


# -- refusals ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("path", "fields"), CHANGES)
@pytest.mark.parametrize("csrf", [None, "forged", ""])
def test_a_change_without_the_csrf_token_is_a_403_and_changes_nothing(
    client: FlaskClient, source: FakeSource, path: str, fields: dict[str, str], csrf: str | None
) -> None:
    before = snapshot(source)
    data = dict(fields) if csrf is None else {**fields, CSRF_FIELD: csrf}
    answer = client.post(path, data=data)
    assert answer.status_code == 403
    assert "CSRF token" in error_message(answer)
    assert snapshot(source) == before


def test_the_csrf_token_of_another_console_is_refused(source: FakeSource, client: FlaskClient) -> None:
    other = create_app(source, token=TOKEN, clock=source.clock).test_client()
    other.set_cookie(COOKIE, TOKEN)
    foreign = csrf_of(text(other.get(f"/change/cancel/{PENDING}")))
    assert client.post(f"/change/cancel/{PENDING}", data={CSRF_FIELD: foreign}).status_code == 403
    assert source.status_of(PENDING) is TaskStatus.PENDING


@pytest.mark.parametrize(("path", "fields"), CHANGES)
def test_a_change_without_the_consoles_token_is_a_401_and_changes_nothing(
    app: Flask, client: FlaskClient, source: FakeSource, path: str, fields: dict[str, str]
) -> None:
    csrf = csrf_of(text(client.get(f"/change/cancel/{PENDING}")))
    before = snapshot(source)
    assert app.test_client().post(path, data={**fields, CSRF_FIELD: csrf}).status_code == 401
    assert snapshot(source) == before


@pytest.fixture
def read_only(source: FakeSource) -> FlaskClient:
    client = create_app(source, token=TOKEN, read_only=True, clock=source.clock).test_client()
    client.set_cookie(COOKIE, TOKEN)
    return client


@pytest.mark.parametrize(("path", "fields"), CHANGES)
def test_a_read_only_console_refuses_every_change_and_its_confirmation(
    read_only: FlaskClient, client: FlaskClient, source: FakeSource, path: str, fields: dict[str, str]
) -> None:
    csrf = csrf_of(text(read_only.get("/")) + text(client.get(f"/change/cancel/{PENDING}")))
    before = snapshot(source)
    assert read_only.post(path, data={**fields, CSRF_FIELD: csrf}).status_code == 403
    assert read_only.get(path, query_string=fields).status_code == 403
    assert snapshot(source) == before


@pytest.mark.parametrize(
    ("path", "buttons"),
    [
        (f"/tasks/{PENDING}", ["Cancel…", "Run now…", "Reschedule…"]),
        ("/tasks/acme/failed-0", ["Redrive…"]),
        (f"/schedules/{SCHEDULE}", ["Pause…", "Run now…", "Delete…"]),
        ("/dead-letters", ['type="checkbox"', "Redrive the checked tasks…"]),
    ],
)
def test_a_read_only_console_shows_no_change(
    read_only: FlaskClient, client: FlaskClient, path: str, buttons: list[str]
) -> None:
    writable, shown = text(client.get(path)), text(read_only.get(path))
    assert "read-only" in shown
    for button in buttons:
        assert button in writable
        assert button not in shown
    assert "/change/" not in shown


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/change/cancel/acme/armed-1", 409, "cannot cancel task 'acme/armed-1': it is armed and about to fire"),
        ("/change/cancel/acme/done-0", 409, "cannot cancel task 'acme/done-0': it is SUCCEEDED"),
        ("/change/run-now/acme/none", 404, "no task 'acme/none'"),
        ("/change/pause/acme/none", 404, "no schedule 'acme/none'"),
    ],
)
def test_a_change_the_source_refuses_is_the_apis_error_and_changes_nothing(
    client: FlaskClient, source: FakeSource, path: str, status: int, message: str
) -> None:
    csrf = csrf_of(text(client.get(f"/change/cancel/{PENDING}")))
    before = snapshot(source)
    answer = client.post(path, data={CSRF_FIELD: csrf})
    assert (answer.status_code, error_message(answer)) == (status, message)
    assert "Nothing was changed." in text(answer)
    assert snapshot(source) == before


@pytest.mark.parametrize(
    ("due_at", "message"),
    [
        ("tomorrow", "invalid due_at: Invalid isoformat string: 'tomorrow'"),
        ("2030-02-30T10:00", "invalid due_at: day is out of range for month"),
        ("", "invalid due_at: give the instant to move the task to"),
        ("2030-06-01T11:00Z", "invalid due_at: is further in the past than the task's misfire grace"),
    ],
)
def test_a_bad_reschedule_instant_is_a_422_naming_the_field_and_changes_nothing(
    client: FlaskClient, source: FakeSource, due_at: str, message: str
) -> None:
    csrf = csrf_of(text(client.get(f"/change/cancel/{PENDING}")))
    before = snapshot(source)
    answer = client.post(f"/change/reschedule/{PENDING}", data={CSRF_FIELD: csrf, "due_at": due_at})
    assert (answer.status_code, error_message(answer)) == (422, message)
    assert snapshot(source) == before


def test_an_unknown_change_is_a_404(client: FlaskClient) -> None:
    assert client.get(f"/change/explode/{PENDING}").status_code == 404
