"""The REST API on moto, through the local server and ApiClient: tenants cannot see each other,
bad input is a 4xx problem naming the field, and the API gives what the direct client gives."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3

import punctual
from punctual.api import build_app
from punctual.config.settings import Settings
from punctual.config.tenant_map import TenantMap
from punctual.domain.keys import from_ms
from punctual.domain.model import TaskStatus
from punctual.errors import (
    ApiError,
    InvalidRequestError,
    InvalidScheduleError,
    InvalidTaskError,
    ScheduleNotFoundError,
    TaskConflictError,
    TaskNotFoundError,
    TaskStateError,
)
from punctual.runtime.client import Client
from punctual.scheduling.api_client import ApiClient
from punctual.targets import HttpAction, LogAction
from punctual_tools.local.api_server import LocalApi
from support import FakeClock, read_task, record_failed, serving_api

TOKENS = {"token-acme": "acme", "token-beta": "beta"}


@pytest.fixture
def direct(dynamodb: Any, settings: Settings, clock: FakeClock) -> Client:
    """The client straight to the table (no tenant)."""
    return Client(settings, dynamodb=dynamodb, clock=clock)


@pytest.fixture
def api(dynamodb: Any, settings: Settings, clock: FakeClock) -> Iterator[LocalApi]:
    with serving_api(dynamodb, settings, clock, TOKENS) as server:
        yield server


@pytest.fixture
def acme(api: LocalApi) -> ApiClient:
    return ApiClient(api.url, token="token-acme")


@pytest.fixture
def beta(api: LocalApi) -> ApiClient:
    return ApiClient(api.url, token="token-beta")


def raw(
    api: LocalApi,
    method: str,
    path: str,
    body: bytes | None = None,
    token: str | None = "token-acme",
) -> tuple[int, str, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    # urllib3.request's own read timeout is 3 s: the local API on a busy machine may take longer
    response = urllib3.request(method, api.url + path, body=body, headers=headers, retries=False, timeout=60.0)
    return response.status, response.headers.get("Content-Type", ""), json.loads(response.data or b"{}")


# -- tenants ---------------------------------------------------------------------------------------------------
def test_another_tenants_task_is_not_found_whatever_is_asked(
    acme: ApiClient, beta: ApiClient, direct: Client, now_ms: int
) -> None:
    # Given a task of tenant acme, and a FAILED one
    acme.schedule(from_ms(now_ms + 60_000), LogAction(message="a"), {"n": 1}, task_id="invoice-42")
    acme.schedule(from_ms(now_ms + 60_000), LogAction(message="f"), task_id="failed-1")
    _fail(direct, "acme/failed-1")
    # When tenant beta asks for them by their ids  Then every operation answers "not found"
    assert beta.get("invoice-42") is None
    assert beta.list() == []
    calls: list[Callable[[], object]] = [
        lambda: beta.cancel("invoice-42"),
        lambda: beta.reschedule("invoice-42", from_ms(now_ms + 1_000)),
        lambda: beta.run_now("invoice-42"),
        lambda: beta.redrive("failed-1"),
    ]
    for call in calls:
        with pytest.raises(TaskNotFoundError):
            call()
    # And acme's tasks are untouched
    task = acme.get("invoice-42")
    assert task is not None
    assert task.status is TaskStatus.PENDING
    assert task.due_ms == now_ms + 60_000
    assert acme.redrive("failed-1").status is TaskStatus.PENDING


def _fail(direct: Client, task_id: str) -> None:
    """Make a task FAILED as an executor would: arm it, record the failure."""
    task = read_task(direct.stores, task_id)
    record_failed(direct.stores, task, "executor-1", task.due_ms - 1_000)


def test_ids_of_other_tenants_cannot_be_spelled(api: LocalApi, acme: ApiClient, beta: ApiClient, now_ms: int) -> None:
    # Given acme's task
    acme.schedule(from_ms(now_ms + 60_000), LogAction(), task_id="secret")
    # When beta names it with acme's prefix, raw or URL-encoded  Then no route or no such task: never acme's
    for path in ("/v1/tasks/acme/secret", "/v1/tasks/acme%2Fsecret", "/v1/tasks/..%2Facme%2Fsecret"):
        status, content_type, body = raw(api, "GET", path, token="token-beta")
        assert status in (404, 422), (path, status)
        assert content_type == "application/problem+json"
        assert "due_at" not in body  # no task in the answer
    # And a task id with a tenant in it is refused when scheduling (the field is named)
    status, _, body = raw(
        api,
        "POST",
        "/v1/tasks",
        json.dumps(
            {"task_id": "acme/x", "due_at": from_ms(now_ms + 60_000).isoformat(), "action": {"kind": "log"}}
        ).encode(),
        token="token-beta",
    )
    assert (status, body["field"]) == (422, "task_id")


def test_tenants_schedules_are_apart(acme: ApiClient, beta: ApiClient) -> None:
    # Given a schedule of acme's and one of beta's with the same id
    acme.create_schedule("daily", "rate(1 minute)", LogAction(message="acme"))
    beta.create_schedule("daily", "rate(2 minutes)", LogAction(message="beta"))
    # Then each sees its own, and its own occurrences
    assert [s.expression for s in acme.list_schedules()] == ["rate(1 minute)"]
    assert [s.expression for s in beta.list_schedules()] == ["rate(2 minutes)"]
    assert all(t.task_id.startswith("daily@") for t in acme.schedule_history("daily"))
    # When beta deletes its own  Then acme's goes on
    beta.delete_schedule("daily")
    assert beta.get_schedule("daily") is None
    acme_daily = acme.get_schedule("daily")
    assert acme_daily is not None
    assert acme_daily.state == "ACTIVE"
    for call in (
        lambda: beta.pause_schedule("daily"),
        lambda: beta.schedule_history("daily"),
        lambda: beta.update_schedule("daily", expression="rate(5 minutes)"),
    ):
        with pytest.raises(ScheduleNotFoundError):
            call()


def test_keys_carry_the_tenant_for_leading_keys(
    acme: ApiClient, dynamodb: Any, settings: Settings, now_ms: int
) -> None:
    # Given a task and a schedule made through the API
    acme.schedule(from_ms(now_ms + 60_000), LogAction(), task_id="t1")
    acme.create_schedule("s1", "rate(1 minute)", LogAction())
    # Then every item of the tenant starts with "acme/" (what dynamodb:LeadingKeys confines a direct client to)
    keys = [i["task_id"]["S"] for i in dynamodb.scan(TableName=settings.table_name)["Items"]]
    tenant_keys = [k for k in keys if not k.startswith("#")]
    assert tenant_keys
    assert all(k.startswith("acme/") for k in tenant_keys)
    assert "acme/#schedule#s1" in keys


def test_a_direct_table_client_of_a_tenant_is_seen_by_the_api(acme: ApiClient, direct: Client, now_ms: int) -> None:
    # Given a task written straight to the table under acme's key (a role confined by LeadingKeys "acme/*")
    direct.schedule(from_ms(now_ms + 60_000), LogAction(), task_id="acme/from-boto3")
    # And one of no tenant
    direct.schedule(from_ms(now_ms + 60_000), LogAction(), task_id="no-tenant")
    # Then the API shows acme the first, by its tenant-free id, and not the other
    assert [t.task_id for t in acme.list()] == ["from-boto3"]


# -- the same results as the direct client ---------------------------------------------------------------------
def test_the_api_gives_what_the_direct_client_gives(acme: ApiClient, direct: Client, now_ms: int) -> None:
    due = from_ms(now_ms + 90_000)
    action = HttpAction(url="https://example.com/hook", headers={"X-Team": "a"})
    through_api = acme.schedule(
        due, action, {"n": [1, 2]}, task_id="same", misfire_grace=5_000, retry={"max_attempts": 3}
    )
    direct_task = direct.schedule(
        due, action, {"n": [1, 2]}, task_id="acme/same2", misfire_grace=5_000, retry={"max_attempts": 3}
    )
    fields = {"due_at", "action", "payload", "misfire_grace_ms", "misfire_policy", "retry", "status", "attempt"}
    assert through_api.model_dump(include=fields) == direct_task.model_dump(include=fields)
    # And the life cycle answers alike
    moved = acme.reschedule("same", from_ms(now_ms + 120_000))
    assert moved.due_ms == now_ms + 120_000
    assert acme.cancel("same").status is TaskStatus.CANCELLED
    with pytest.raises(TaskStateError):
        acme.cancel("same")
    # And an idempotent retry answers the stored task; other content is a conflict
    assert acme.schedule(due, action, {"n": [1, 2]}, task_id="again").task_id == "again"
    assert acme.schedule(due, action, {"n": [1, 2]}, task_id="again").task_id == "again"
    with pytest.raises(TaskConflictError):
        acme.schedule(due, action, {"n": 3}, task_id="again")


def test_run_now_moves_the_task_to_now(acme: ApiClient, now_ms: int) -> None:
    acme.schedule(from_ms(now_ms + 3_600_000), LogAction(), task_id="later")
    assert acme.run_now("later").due_ms == now_ms


def test_concurrent_requests_are_each_answered_from_their_own_body(
    acme: ApiClient, direct: Client, now_ms: int
) -> None:
    # Given 60 tasks scheduled through the API by 12 threads at once
    specs = [
        {
            "due_at": from_ms(now_ms + 60_000 + i),
            "action": LogAction(message=f"m{i}"),
            "payload": {"i": i},
            "task_id": f"c-{i:02d}",
        }
        for i in range(60)
    ]
    results = acme.schedule_many(specs, threads=12)
    # Then each was created, and each stored task holds its own request's content
    assert [r.outcome for r in results] == ["created"] * 60, [r.error for r in results if r.error][:3]
    for i in range(60):
        stored = direct.get(f"acme/c-{i:02d}")
        assert stored is not None
        assert stored.payload == {"i": i}
        assert stored.due_ms == now_ms + 60_000 + i


def test_schedule_many_through_the_api(acme: ApiClient, now_ms: int) -> None:
    specs = [{"due_at": from_ms(now_ms + 60_000 + i), "action": LogAction(), "task_id": f"bulk-{i}"} for i in range(5)]
    specs.append({"due_at": from_ms(now_ms + 60_000), "action": {"kind": "nope"}, "task_id": "bad"})
    first = acme.schedule_many(specs, threads=4)
    assert [r.outcome for r in first] == ["created"] * 5 + ["invalid"]
    assert first[-1].field == "action"
    assert [r.outcome for r in acme.schedule_many(specs[:5])] == ["exists"] * 5


def test_pages_cover_a_tenants_tasks_once(acme: ApiClient, beta: ApiClient, api: LocalApi, now_ms: int) -> None:
    for i in range(23):
        acme.schedule(from_ms(now_ms + 60_000 + i), LogAction(), task_id=f"p-{i:02d}")
    beta.schedule(from_ms(now_ms + 60_000), LogAction(), task_id="p-beta")
    seen: list[str] = []
    token = None
    for _ in range(10):
        query = "?limit=10" + (f"&next_token={token}" if token else "")
        status, _, page = raw(api, "GET", "/v1/tasks" + query)
        assert status == 200
        seen.extend(t["task_id"] for t in page["tasks"])
        token = page.get("next_token")
        if not token:
            break
    assert sorted(seen) == [f"p-{i:02d}" for i in range(23)]
    # And a token this API did not give is refused, naming it
    status, _, body = raw(api, "GET", "/v1/tasks?next_token=%%%")
    assert (status, body["field"]) == (422, "next_token")


# -- bad input -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{not json", "body"),
        (b'{"due_at": "tomorrow", "action": {"kind": "log"}}', "due_at"),
        (b'{"due_at": "{due}", "action": {"kind": "log"}}', "due_at"),
        (b'{"due_at": "{due}Z", "action": {"kind": "ftp"}}', "action"),
        (b'{"due_at": "{due}Z", "action": {"kind": "http", "url": "http://169.254.169.254/"}}', "action.url"),
        (b'{"due_at": "{due}Z", "action": {"kind": "log"}, "extra": 1}', "extra"),
        (b'{"due_at": "{due}Z", "action": {"kind": "log"}, "misfire_grace_ms": -1}', "misfire_grace_ms"),
        (b"[]", None),
    ],
)
def test_bad_input_is_a_problem_naming_the_field_and_stores_nothing(
    api: LocalApi, acme: ApiClient, body: bytes, field: str | None, now_ms: int
) -> None:
    due = from_ms(now_ms + 60_000).replace(tzinfo=None).isoformat()
    status, content_type, problem = raw(api, "POST", "/v1/tasks", body.replace(b"{due}", due.encode()))
    assert status in (400, 422)
    assert content_type == "application/problem+json"
    assert problem["status"] == status
    assert problem["detail"]
    if field is not None:
        assert problem["field"].split(".")[0] == field.split(".")[0], problem
        if "." in field:
            assert problem["field"].startswith(field) or field in problem["detail"], problem
    assert acme.list() == []


def test_unknown_routes_and_states_are_problems(api: LocalApi, acme: ApiClient, now_ms: int) -> None:
    assert raw(api, "GET", "/v1/nothing")[0] == 404
    assert raw(api, "GET", "/v1/tasks/nobody")[0] == 404
    assert raw(api, "POST", "/v1/tasks/nobody/redrive")[0] == 404
    acme.schedule(from_ms(now_ms + 60_000), LogAction(), task_id="pending")
    status, _, problem = raw(api, "POST", "/v1/tasks/pending/redrive")
    assert (status, problem["type"]) == (409, "/problems/state")
    with pytest.raises(InvalidTaskError):
        acme.reschedule("pending", from_ms(now_ms + 400 * 86_400_000))


def test_no_token_or_a_wrong_one_is_401_and_an_unmapped_principal_403(
    api: LocalApi, dynamodb: Any, settings: Settings
) -> None:
    assert raw(api, "GET", "/v1/tasks", token=None)[0] == 401
    assert raw(api, "GET", "/v1/tasks", token="token-acme-not")[0] == 401
    with pytest.raises(ApiError) as info:
        ApiClient(api.url, token="wrong").list()
    assert info.value.status == 401
    # And through API Gateway's event: a principal the tenant map does not name is refused
    app = build_app(
        lambda: Client(settings, dynamodb=dynamodb), TenantMap.parse('{"arn:aws:iam::123456789012:role/Acme": "acme"}')
    )
    unmapped = app.resolve(gateway_event("GET", "/v1/tasks", "arn:aws:iam::123456789012:user/mallory"), None)  # type: ignore[arg-type]  # reads no context
    assert unmapped["statusCode"] == 403
    mapped = app.resolve(
        gateway_event("GET", "/v1/tasks", "arn:aws:sts::123456789012:assumed-role/Acme/session-1"),
        None,  # type: ignore[arg-type]  # reads no context
    )
    assert mapped["statusCode"] == 200


def gateway_event(method: str, path: str, user_arn: str | None, body: str | None = None) -> dict[str, Any]:
    """An API Gateway REST proxy event as IAM authentication leaves it (no authorizer)."""
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": {},
        "multiValueHeaders": {},
        "queryStringParameters": None,
        "multiValueQueryStringParameters": None,
        "pathParameters": None,
        "stageVariables": None,
        "body": body,
        "isBase64Encoded": False,
        "requestContext": {
            "requestId": "r-1",
            "stage": "prod",
            "httpMethod": method,
            "path": path,
            "identity": {"sourceIp": "10.0.0.1", "userArn": user_arn},
        },
    }


# -- found by a review (each a 5xx or a leak before its fix) ----------------------------------------------------
def test_a_forged_schedule_id_does_not_put_another_tenants_task_in_a_history(
    acme: ApiClient, direct: Client, dynamodb: Any, settings: Settings, now_ms: int
) -> None:
    # Given acme's schedule, and an item of beta's written straight to the table (a client confined to "beta/*"
    # by LeadingKeys may do that) that names acme's schedule in its schedule_id attribute
    acme.create_schedule("daily", "rate(1 minute)", LogAction())
    forged = direct.build_task(from_ms(now_ms + 60_000), LogAction(), task_id="beta/forged")
    item = direct.to_item(forged)
    item["schedule_id"] = {"S": "acme/daily"}
    dynamodb.put_item(TableName=settings.table_name, Item=item)
    # Then acme's history holds only its own occurrences
    history = acme.schedule_history("daily")
    assert history
    assert all(t.task_id.startswith("daily@") for t in history)


def test_a_deeply_nested_body_is_a_400(api: LocalApi) -> None:
    status, content_type, problem = raw(api, "POST", "/v1/tasks", b"[" * 100_000)
    assert (status, content_type, problem["field"]) == (400, "application/problem+json", "body")


@pytest.mark.parametrize("instant", ["0001-01-01T00:00%2B01:00", "9999-12-31T23:59-01:00"])
def test_an_instant_outside_the_years_1_to_9999_in_utc_is_a_422(api: LocalApi, instant: str) -> None:
    status, _, problem = raw(api, "GET", f"/v1/tasks?due_from={instant}")
    assert (status, problem["field"]) == (422, "due_from")


def test_the_api_client_raises_the_invalid_request_its_call_made(acme: ApiClient, now_ms: int) -> None:
    # When a read's query parameter is bad  Then it is an invalid request, no invalid task
    with pytest.raises(InvalidRequestError) as query:
        acme.list(status="NOT-A-STATUS")
    assert not isinstance(query.value, InvalidTaskError)
    assert (query.value.field or "").startswith("status")
    # When a schedule's expression is bad  Then it is an invalid schedule naming the field
    with pytest.raises(InvalidScheduleError) as schedule:
        acme.create_schedule("daily", "cron(not a cron)", LogAction())
    assert schedule.value.field == "expression"
    assert str(schedule.value).startswith("invalid expression: ")
    # And a missing schedule is no missing task, nor the other way round
    with pytest.raises(ScheduleNotFoundError) as no_schedule:
        acme.pause_schedule("nothing")
    assert not isinstance(no_schedule.value, TaskNotFoundError)
    assert no_schedule.value.key == "nothing"
    with pytest.raises(TaskNotFoundError) as no_task:
        acme.cancel("nothing")
    assert not isinstance(no_task.value, ScheduleNotFoundError)
    assert str(no_task.value) == "no task 'nothing'"


def test_a_status_named_many_times_is_one_filter(api: LocalApi, acme: ApiClient, now_ms: int) -> None:
    acme.schedule(from_ms(now_ms + 60_000), LogAction(), task_id="one")
    status, _, page = raw(api, "GET", "/v1/tasks?" + "&".join(["status=PENDING"] * 150))
    assert status == 200
    assert [t["task_id"] for t in page["tasks"]] == ["one"]


def test_a_page_stays_within_what_lambda_can_answer(api: LocalApi, acme: ApiClient, now_ms: int) -> None:
    # Given 20 tasks with 250 KB payloads each (5 MB in all: more than a 4 MB page)
    big = "x" * 250_000
    for i in range(20):
        acme.schedule(from_ms(now_ms + 60_000), LogAction(), {"blob": big}, task_id=f"big-{i:02d}")
    # When they are listed 100 a page  Then each page is under 4 MB of JSON, and the pages hold all 20 once
    seen: list[str] = []
    token = None
    for _ in range(5):
        response = urllib3.request(
            "GET",
            api.url + "/v1/tasks?limit=100" + (f"&next_token={token}" if token else ""),
            headers={"Authorization": "Bearer token-acme"},
            timeout=60.0,  # see raw(): 5 MB of items on a busy machine takes longer than urllib3's own 3 s
        )
        assert response.status == 200
        assert len(response.data) < 4_100_000
        page = json.loads(response.data)
        seen.extend(t["task_id"] for t in page["tasks"])
        token = page.get("next_token")
        if not token:
            break
    assert sorted(seen) == [f"big-{i:02d}" for i in range(20)]


def test_connect_goes_through_the_api_when_its_url_is_set(
    api: LocalApi, settings: Settings, dynamodb: Any, now_ms: int
) -> None:

    through = punctual.connect(settings.model_copy(update={"api_url": api.url, "api_token": "token-acme"}))
    assert isinstance(through, ApiClient)
    through.schedule(from_ms(now_ms + 60_000), LogAction(), task_id="via-connect")
    assert Client(settings, dynamodb=dynamodb).get("acme/via-connect") is not None
    assert isinstance(punctual.connect(settings), Client)
