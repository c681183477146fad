"""Client.build_task: every way a task can be refused before anything is stored, with exact time edges."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from punctual.config.settings import Settings
from punctual.domain.keys import from_ms
from punctual.errors import InvalidTaskError
from punctual.scheduling.client import Client
from punctual.targets import HttpAction, LogAction
from support import FakeClock, NoRepository

NOW_MS = 1_700_000_000_000
DAY_MS = 86_400_000


@pytest.fixture
def settings() -> Settings:
    return Settings(ntp_server=None, max_horizon_days=30, max_payload_bytes=1_000, default_misfire_grace_ms=5_000)


@pytest.fixture
def client(settings: Settings) -> Client:
    return Client(settings, NoRepository(), NoRepository(), clock=FakeClock(wall_ms=float(NOW_MS)))  # type: ignore[arg-type]


def at(ms: int) -> datetime:
    return from_ms(ms)


def refused(client: Client, **kwargs: object) -> InvalidTaskError:
    fields: dict[str, object] = {"due_at": at(NOW_MS + 10_000), "action": LogAction()}
    fields.update(kwargs)
    with pytest.raises(InvalidTaskError) as info:
        client.build_task(**fields)  # type: ignore[arg-type]
    return info.value


def test_a_valid_task_is_built_with_defaults(client: Client) -> None:
    # When a task is built without id or grace
    task = client.build_task(at(NOW_MS + 10_000), {"kind": "log", "message": "hi"}, {"k": [1, 2]})
    # Then it gets a generated id, the default grace, and keeps what was given
    assert task.task_id
    assert task.misfire_grace_ms == 5_000
    assert task.due_ms == NOW_MS + 10_000
    assert task.payload == {"k": [1, 2]}
    assert isinstance(task.action, LogAction)


def test_grace_can_be_a_timedelta_or_ms(client: Client) -> None:
    assert client.build_task(at(NOW_MS), LogAction(), misfire_grace=timedelta(seconds=2)).misfire_grace_ms == 2_000
    assert client.build_task(at(NOW_MS), LogAction(), misfire_grace=250).misfire_grace_ms == 250


def test_naive_due_at_is_refused(client: Client) -> None:
    error = refused(client, due_at=datetime(2030, 1, 1, 12, 0))
    assert error.field == "due_at"
    assert "naive" in str(error)


def test_due_at_that_is_not_a_datetime_is_refused(client: Client) -> None:
    assert refused(client, due_at="2030-01-01T12:00:00Z").field == "due_at"


def test_horizon_edge_is_exact(client: Client, settings: Settings) -> None:
    horizon = NOW_MS + settings.max_horizon_days * DAY_MS
    # Given a due time exactly at the horizon: accepted
    assert client.build_task(at(horizon), LogAction()).due_ms == horizon
    # Given one millisecond beyond it: refused
    error = refused(client, due_at=at(horizon + 1))
    assert error.field == "due_at"
    assert "horizon" in str(error)


def test_far_beyond_the_horizon_is_refused(client: Client) -> None:
    assert refused(client, due_at=at(NOW_MS + 400 * DAY_MS)).field == "due_at"


def test_past_edge_is_exact_at_the_grace(client: Client) -> None:
    # Given a grace of 1 s: due exactly 1 s ago is accepted (it can still fire within its grace)
    assert client.build_task(at(NOW_MS - 1_000), LogAction(), misfire_grace=1_000).due_ms == NOW_MS - 1_000
    # And 1,001 ms ago is refused: it could only be recorded MISSED
    error = refused(client, due_at=at(NOW_MS - 1_001), misfire_grace=1_000)
    assert error.field == "due_at"
    assert "MISSED" in str(error)


def test_past_within_the_default_grace_is_accepted(client: Client) -> None:
    assert client.build_task(at(NOW_MS - 4_999), LogAction()).due_ms == NOW_MS - 4_999
    assert client.build_task(at(NOW_MS), LogAction()).due_ms == NOW_MS


def test_zero_grace_accepts_now_and_refuses_one_ms_before(client: Client) -> None:
    assert client.build_task(at(NOW_MS), LogAction(), misfire_grace=0).due_ms == NOW_MS
    assert refused(client, due_at=at(NOW_MS - 1), misfire_grace=0).field == "due_at"


def test_an_explicit_now_overrides_the_clock(client: Client) -> None:
    # The clock says NOW_MS; with now_ms one hour later, a due time at NOW_MS is long past
    with pytest.raises(InvalidTaskError):
        client.build_task(at(NOW_MS), LogAction(), now_ms=NOW_MS + 3_600_000)


def test_oversize_payload_is_refused(client: Client, settings: Settings) -> None:
    # Given a payload whose canonical JSON is exactly at the limit: accepted
    at_limit = "x" * (settings.max_payload_bytes - 2)  # the two quotes make up the rest
    assert client.build_task(at(NOW_MS + 1), LogAction(), at_limit).payload == at_limit
    # And one byte more: refused
    error = refused(client, payload=at_limit + "x")
    assert error.field == "payload"


def test_payload_size_counts_utf8_bytes(client: Client, settings: Settings) -> None:
    # 400 two-byte characters: 400 characters but 802 bytes as JSON, then 600 of them: 1,202 bytes > 1,000
    assert client.build_task(at(NOW_MS + 1), LogAction(), "é" * 400).payload == "é" * 400
    assert refused(client, payload="é" * 600).field == "payload"


def test_payload_that_is_not_valid_unicode_is_refused(client: Client) -> None:
    # Regression: a lone surrogate used to escape as UnicodeEncodeError instead of InvalidTaskError
    assert refused(client, payload={"text": "\ud800"}).field == "payload"


@pytest.mark.parametrize("task_id", ["", "-x", "has space", "x" * 129, "#poller-watermark"])
def test_bad_task_id_is_refused(client: Client, task_id: str) -> None:
    assert refused(client, task_id=task_id).field == "task_id"


def test_unknown_action_kind_is_refused(client: Client) -> None:
    error = refused(client, action={"kind": "smoke-signal"})
    assert error.field == "action"
    assert "smoke-signal" in str(error)
    assert "http" in str(error)
    assert "log" in str(error)


@pytest.mark.parametrize("url", ["not a url", "ftp://example.com/hook", "http://", "//example.com/x"])
def test_malformed_url_is_refused(client: Client, url: str) -> None:
    error = refused(client, action={"kind": "http", "url": url})
    assert error.field is not None
    assert error.field.split(".")[0] == "action"


def test_http_action_is_accepted(client: Client) -> None:
    task = client.build_task(at(NOW_MS + 1), {"kind": "http", "url": "https://example.com/hook"}, task_id="h-1")
    assert isinstance(task.action, HttpAction)
    assert task.idempotency_key == "h-1:0"


def test_out_of_range_grace_is_refused(client: Client) -> None:
    assert refused(client, misfire_grace=-1).field == "misfire_grace_ms"
