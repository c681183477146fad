"""The REST API's batch create (POST /v1/tasks:batch) on moto, through the local server: an outcome per task in
order, idempotent by id, a bad task named under ``tasks[i]`` without holding up the others, each task admitted
against its tenant's quota, tenants apart, and the call's limits."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3

from punctual.config.settings import Settings
from punctual.domain.keys import from_ms
from punctual.runtime.client import Client
from punctual.scheduling.api_client import ApiClient
from punctual.scheduling.bulk import BATCH_MAX_BYTES, BATCH_MAX_TASKS
from punctual.targets import LogAction
from punctual_tools.local.api_server import LocalApi
from support import FakeClock, serving_api

TOKENS = {"token-acme": "acme", "token-beta": "beta"}
QUOTAS = {"active_tasks": 3}
BATCH = "/v1/tasks:batch"


@pytest.fixture
def tenant_settings(settings: Settings) -> Settings:
    """acme may hold 3 active tasks; beta has no quota of its own."""
    return settings.model_copy(update={"tenant_map": json.dumps({"tenants": {"acme": {"quotas": QUOTAS}}})})


@pytest.fixture
def direct(dynamodb: Any, tenant_settings: Settings, now_ms: int) -> Client:
    """The client straight to the table (no tenant)."""
    return Client(tenant_settings, dynamodb=dynamodb, clock=FakeClock(wall_ms=now_ms))


@pytest.fixture
def api(dynamodb: Any, tenant_settings: Settings, now_ms: int) -> Iterator[LocalApi]:
    with serving_api(dynamodb, tenant_settings, FakeClock(wall_ms=now_ms), TOKENS) as server:
        yield server


def post(api: LocalApi, body: Any, token: str = "token-acme") -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    # urllib3.request's own read timeout is 3 s: the local API on a busy machine may take longer
    response = urllib3.request("POST", api.url + BATCH, body=data, headers=headers, retries=False, timeout=60.0)
    return response.status, json.loads(response.data or b"{}")


def task(now_ms: int, name: str | None, **fields: Any) -> dict[str, Any]:
    body = {"due_at": from_ms(now_ms + 60_000).isoformat(), "action": {"kind": "log", "message": "hi"}, **fields}
    return body if name is None else {"task_id": name, **body}


def stored_ids(dynamodb: Any, settings: Settings) -> list[str]:
    pages = dynamodb.get_paginator("scan").paginate(TableName=settings.table_name, ProjectionExpression="task_id")
    return sorted(item["task_id"]["S"] for page in pages for item in page["Items"])


def test_each_task_has_its_outcome_in_order_and_the_same_batch_again_is_exists(
    api: LocalApi, dynamodb: Any, tenant_settings: Settings, now_ms: int
) -> None:
    # Given a batch of beta's (no quota): two tasks, one without an id
    batch = {"tasks": [task(now_ms, "a", payload={"n": 1}), task(now_ms, "b"), task(now_ms, None)]}
    # When it is sent, then sent again
    first_status, first = post(api, batch, "token-beta")
    again_status, again = post(api, {"tasks": batch["tasks"][:2]}, "token-beta")
    # Then each call is 200 with an outcome per task in order: created (201, with the task as stored, its id
    # without the tenant), then exists (200, the same task) for the ids given; nothing is stored twice
    assert (first_status, again_status) == (200, 200)
    assert [(r["index"], r["outcome"], r["status"]) for r in first["results"]] == [
        (0, "created", 201),
        (1, "created", 201),
        (2, "created", 201),
    ]
    assert first["results"][0]["task"]["task_id"] == "a"
    assert first["results"][0]["task"]["payload"] == {"n": 1}
    assert first["results"][0]["task"]["status"] == "PENDING"
    given = first["results"][2]["task_id"]
    assert given
    assert "/" not in given
    assert [(r["outcome"], r["status"]) for r in again["results"]] == [("exists", 200), ("exists", 200)]
    assert [r["task"] for r in again["results"]] == [r["task"] for r in first["results"][:2]]
    assert stored_ids(dynamodb, tenant_settings) == sorted(["beta/a", "beta/b", f"beta/{given}"])


def test_a_partly_bad_batch_stores_the_good_and_names_each_bad_under_its_index(
    api: LocalApi, dynamodb: Any, tenant_settings: Settings, now_ms: int
) -> None:
    # Given a batch of good tasks and bad ones: a field of the body, a task the client's checks refuse (its target),
    # a task that is no object, and an id that holds another task
    post(api, {"tasks": [task(now_ms, "taken", payload=1)]}, "token-beta")
    batch = [
        task(now_ms, "good-1"),
        task(now_ms, "bad-grace", misfire_grace_ms=-1),
        task(now_ms, "bad-url", action={"kind": "http", "url": "http://169.254.169.254/"}),
        "not a task",
        task(now_ms, "taken", payload=2),
        task(now_ms, "good-2"),
    ]
    # When it is sent
    status, answer = post(api, {"tasks": batch}, "token-beta")
    # Then the call is 200; the good are stored; each bad one is the problem POST /v1/tasks would give, its field
    # named under tasks[i]; the id taken is a conflict
    assert status == 200
    results = answer["results"]
    assert [(r["outcome"], r["status"]) for r in results] == [
        ("created", 201),
        ("invalid", 422),
        ("invalid", 422),
        ("invalid", 422),
        ("conflict", 409),
        ("created", 201),
    ]
    assert results[1]["problem"]["field"] == "tasks[1].misfire_grace_ms"
    assert results[1]["problem"]["type"] == "/problems/invalid"
    assert results[1]["task_id"] == "bad-grace"
    assert results[2]["problem"]["field"].startswith("tasks[2].action")
    assert results[3]["problem"]["field"] == "tasks[3]"
    assert results[4]["problem"]["type"] == "/problems/conflict"
    assert "beta/" not in results[4]["problem"]["detail"]
    assert stored_ids(dynamodb, tenant_settings) == ["beta/good-1", "beta/good-2", "beta/taken"]


def test_a_batch_past_the_tenants_active_tasks_stores_only_what_the_quota_admits(
    api: LocalApi, dynamodb: Any, tenant_settings: Settings, now_ms: int
) -> None:
    # Given acme, which may hold 3 active tasks, holding 1
    post(api, {"tasks": [task(now_ms, "held")]})
    # When it sends a batch of 4
    status, answer = post(api, {"tasks": [task(now_ms, f"t-{i}") for i in range(4)]})
    # Then 2 are created and 2 are over quota (429, naming active_tasks), stored nowhere
    assert status == 200
    outcomes = sorted((r["outcome"], r["status"]) for r in answer["results"])
    assert outcomes == [("created", 201), ("created", 201), ("over_quota", 429), ("over_quota", 429)]
    refused = [r for r in answer["results"] if r["outcome"] == "over_quota"]
    assert all(r["problem"]["type"] == "/problems/quota" and r["problem"]["quota"] == "active_tasks" for r in refused)
    created = {f"acme/{r['task_id']}" for r in answer["results"] if r["outcome"] == "created"}
    assert stored_ids(dynamodb, tenant_settings) == sorted({"acme/held"} | created)


def test_a_tenant_creates_under_its_own_prefix_only(
    api: LocalApi, dynamodb: Any, tenant_settings: Settings, now_ms: int
) -> None:
    # Given a batch of acme's naming beta's key in an id, and ids it may use
    batch = [task(now_ms, "beta/stolen"), task(now_ms, "mine")]
    # When acme sends it
    status, answer = post(api, {"tasks": batch})
    # Then the id reaching into another tenant is refused, naming it, and acme's own is stored under acme's prefix
    assert status == 200
    assert [r["outcome"] for r in answer["results"]] == ["invalid", "created"]
    assert answer["results"][0]["problem"]["field"] == "tasks[0].task_id"
    assert stored_ids(dynamodb, tenant_settings) == ["acme/mine"]


def test_a_batch_past_its_limits_is_a_413_naming_tasks_and_stores_nothing(
    api: LocalApi, dynamodb: Any, tenant_settings: Settings, now_ms: int
) -> None:
    # Given a batch of one task more than a call takes, and one of few tasks but more bytes than a call takes
    too_many = {"tasks": [task(now_ms, f"n-{i}") for i in range(BATCH_MAX_TASKS + 1)]}
    too_big = {"tasks": [task(now_ms, "big", payload="x" * BATCH_MAX_BYTES)]}
    # When each is sent  Then each is a 413 problem naming tasks, and nothing is stored
    for batch in (too_many, too_big):
        status, problem = post(api, batch, "token-beta")
        assert (status, problem["field"], problem["type"]) == (413, "tasks", "/problems/invalid"), problem
    assert stored_ids(dynamodb, tenant_settings) == []


@pytest.mark.parametrize("body", [b"{not json", b"[]", b'{"tasks": {}}', b'{"tasks": [], "more": 1}', b"{}"], ids=str)
def test_a_bad_envelope_is_refused_whole(api: LocalApi, body: bytes) -> None:
    status, problem = post(api, body)
    assert status in (400, 422), problem
    assert problem["type"] == "/problems/invalid", problem


def test_an_empty_batch_is_an_empty_answer(api: LocalApi) -> None:
    assert post(api, {"tasks": []}) == (200, {"results": []})


# -- ApiClient.schedule_many through the batch route -----------------------------------------------------------
def test_the_api_client_sends_calls_of_up_to_the_limits_and_reports_each_task(
    api: LocalApi,
    dynamodb: Any,
    tenant_settings: Settings,
    now_ms: int,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:

    # Given beta's client, recording the calls it makes, waiting for an answer as long as the test may run (how the
    # calls are cut is under test, not how soon a busy machine answers a MiB of tasks)
    client = ApiClient(api.url, token="token-beta", timeout_s=float(request.config.getini("timeout")))
    calls: list[tuple[str, int, int]] = []
    send = client._send

    def recording(method: str, path: str, body: Any = None, query: Any = None) -> tuple[int, Any]:
        tasks = body.get("tasks", [body]) if isinstance(body, dict) else []
        calls.append((path, len(tasks), len(json.dumps(body, default=str))))
        return send(method, path, body, query)

    monkeypatch.setattr(client, "_send", recording)
    sent: list[str] = []  # every request that went out, a call sent again included
    http_request = client._http.request

    def counting(method: str, url: str, **kwargs: Any) -> Any:
        sent.append(url)
        return http_request(method, url, **kwargs)

    monkeypatch.setattr(client._http, "request", counting)
    due = from_ms(now_ms + 60_000)
    small = [{"due_at": due, "action": LogAction(), "task_id": f"s-{i:03d}"} for i in range(BATCH_MAX_TASKS * 2 + 5)]
    large = [{"due_at": due, "action": LogAction(), "payload": "x" * 200_000, "task_id": f"l-{i}"} for i in range(6)]
    too_large = {"due_at": due, "action": LogAction(), "payload": "x" * BATCH_MAX_BYTES, "task_id": "huge"}
    specs = [*small, *large, too_large, {"due_at": due.replace(tzinfo=None), "action": LogAction(), "task_id": "naive"}]
    # When it schedules them all
    results = client.schedule_many(specs, threads=4)
    # Then the tasks went in order in calls of at most BATCH_MAX_TASKS and BATCH_MAX_BYTES (100, 100, then the 5
    # small left with the 5 large that fit a MiB, then the last large), the one too large to share a call alone
    # through POST /v1/tasks (which refused its payload), and the naive instant was refused before sending
    batches = sorted(n for path, n, _ in calls if path == "/v1/tasks:batch")
    assert batches == sorted([BATCH_MAX_TASKS, BATCH_MAX_TASKS, 10, 1]), calls
    assert all(size <= BATCH_MAX_BYTES for path, _, size in calls if path == "/v1/tasks:batch")
    assert [(path, n) for path, n, _ in calls if path == "/v1/tasks"] == [("/v1/tasks", 1)]
    assert [r.index for r in results] == list(range(len(specs)))
    # (a call whose answer was lost, as on a busy machine, is sent again whole: its tasks then answer "exists")
    sent_again = len(sent) > len(calls)
    stored = {"created", "exists"} if sent_again else {"created"}
    assert {r.outcome for r in results[: len(small) + len(large)]} <= stored, [(r.outcome, r.error) for r in results]
    assert [r.outcome for r in results[len(small) + len(large) :]] == ["invalid", "invalid"]
    assert (results[-2].field, results[-1].field) == ("payload", "due_at")
    assert results[0].task is not None
    assert results[0].task.task_id == "s-000"
    # And the same tasks again are each "exists", stored once
    again = client.schedule_many(specs[:-2], threads=4)
    assert {r.outcome for r in again} == {"exists"}
    assert len(stored_ids(dynamodb, tenant_settings)) == len(small) + len(large)


def test_the_api_client_reports_a_batchs_quota_and_bad_fields_as_the_direct_client_does(
    api: LocalApi, now_ms: int
) -> None:

    # Given acme (3 active tasks at most) and 5 tasks, one of them of a bad misfire grace
    due = from_ms(now_ms + 60_000)
    specs: list[dict[str, Any]] = [{"due_at": due, "action": LogAction(), "task_id": f"q-{i}"} for i in range(4)]
    specs.append({"due_at": due, "action": LogAction(), "task_id": "bad", "misfire_grace": -1})
    # When acme's client schedules them
    results = ApiClient(api.url, token="token-acme").schedule_many(specs)
    # Then 3 are created, 1 is invalid for its quota (named), and the bad one is invalid naming its field
    assert sorted(r.outcome for r in results[:4]) == ["created", "created", "created", "invalid"]
    (over,) = [r for r in results[:4] if r.outcome == "invalid"]
    assert over.quota == "active_tasks"
    assert over.task_id is not None
    assert over.task_id.startswith("q-")
    assert (results[4].outcome, results[4].field, results[4].quota) == ("invalid", "misfire_grace_ms", None)
