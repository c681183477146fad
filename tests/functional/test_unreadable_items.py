"""One unreadable item breaks nothing but itself, on moto: items written straight into the table (as a tenant's
direct-table role may write them) that cannot be decoded, whatever the exception their decoding raises.

* A schedule item whose time zone names a folder of the zone database (``"America"``: reading it is an OSError,
  not a ValueError) is taken out of the due index by the poll, once, without a traceback; the tenant's schedule
  create and list keep working through the REST API, and the operator's all-tenant ``punctual schedules list``
  lists the others and says on stderr what it left out.
* A task item whose action is JSON nested too deeply to read (a RecursionError) is left out of the REST list,
  of ``punctual list`` and of an executor's batch, and counted; its neighbours are listed and armed.

The REST API itself refuses a folder time zone (create and change), a cron schedule that starts near the year
9999 and a JSON integer of thousands of digits with a 4xx problem naming the field.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from punctual.config.settings import Settings
from punctual.domain.keys import from_ms
from punctual.domain.model import ArmRequest, Unreadable
from punctual.domain.schedules import Schedule
from punctual.runtime.client import Client
from punctual.runtime.wiring import poller_on
from punctual.scheduling.api_client import ApiClient
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.dynamodb.codec import schedule_key
from punctual.targets import LogAction
from punctual_tools.cli import main
from punctual_tools.local.api_server import LocalApi
from support import FIXED_NOW_MS, FakeClock, RecordingInvoker, serving_api

TOKENS = {"token-acme": "acme"}
DEEP = "[" * 100_000 + "]" * 100_000  # JSON that json.loads cannot read: a RecursionError, no ValueError


@pytest.fixture
def api(dynamodb: Any, settings: Settings, clock: FakeClock) -> Iterator[LocalApi]:
    with serving_api(dynamodb, settings, clock, TOKENS) as server:
        yield server


def call(api: LocalApi, method: str, path: str, body: bytes | None = None) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json", "Authorization": "Bearer token-acme"}
    # urllib3.request's own read timeout is 3 s: the local API on a busy machine may take longer
    response = urllib3.request(method, api.url + path, body=body, headers=headers, retries=False, timeout=60.0)
    return response.status, json.loads(response.data or b"{}")


def forge_schedule(dynamodb: Any, settings: Settings, schedule_id: str, **definition: Any) -> str:
    """Write an ACTIVE schedule item as a direct-table role may, its definition changed by ``definition``, due in
    the index at the next poll; its key."""
    store = DynamoStores.from_settings(dynamodb, settings)
    schedule = Schedule(
        schedule_id=schedule_id,
        expression="rate(1 hour)",
        start_at=from_ms(FIXED_NOW_MS + 60_000),
        action=LogAction(message="forged"),
        next_due_ms=FIXED_NOW_MS + 60_000,
    )
    item = store.schedules.schedule_item(schedule, FIXED_NOW_MS)
    forged = {**json.loads(item["definition"]["S"]), **definition}
    dynamodb.put_item(TableName=settings.table_name, Item={**item, "definition": {"S": json.dumps(forged)}})
    return schedule_key(schedule_id)


def forge_task(dynamodb: Any, settings: Settings, client: Client, task_id: str, **attributes: Any) -> None:
    """Write a PENDING task item as a direct-table role may, with ``attributes`` written over its own."""
    store = DynamoStores.from_settings(dynamodb, settings)
    task = client.build_task(from_ms(FIXED_NOW_MS + 30_000), LogAction(message="forged"), task_id=task_id)
    dynamodb.put_item(TableName=settings.table_name, Item={**store.client.item_of(task, FIXED_NOW_MS), **attributes})


@pytest.fixture
def cli(dynamodb: Any, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run ``punctual <args> --aws`` (the operator's, every tenant's items) against the moto table."""
    for name in [n for n in os.environ if n.startswith("PUNCTUAL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PUNCTUAL_TABLE_NAME", settings.table_name)
    monkeypatch.setenv("PUNCTUAL_REGION", "us-east-1")
    return lambda *args: main(["--home", str(tmp_path / "home"), *args, "--aws"])


# -- a schedule item with a folder for a time zone ---------------------------------------------------------------
def test_a_schedule_with_a_folder_for_a_zone_is_left_out_and_the_tenant_goes_on(
    api: LocalApi, client: Client, dynamodb: Any, settings: Settings
) -> None:
    # Given acme's good schedule, and a forged one whose time zone is a folder of the zone database
    client.create_schedule("acme/good", "rate(1 hour)", LogAction(message="good"))
    forged = forge_schedule(dynamodb, settings, "acme/forged", timezone="America")
    acme = ApiClient(api.url, token="token-acme")

    # When acme lists its schedules and creates another  Then both work: the forged one is left out, and counted
    unreadable = Unreadable()
    assert [s.schedule_id for s in acme.list_schedules(unreadable=unreadable)] == ["good"]
    assert unreadable.count == 1
    status, body = call(api, "GET", "/v1/schedules")
    assert (status, body["unreadable"], [s["schedule_id"] for s in body["schedules"]]) == (200, 1, ["good"])
    assert acme.create_schedule("other", "cron(0 9 * * ? *)", LogAction(message="o")).schedule_id == "other"
    # ... and the direct client's all-tenant listing says which item it left out
    unreadable = Unreadable()
    assert [s.schedule_id for s in client.list_schedules(unreadable=unreadable)] == ["acme/good", "acme/other"]
    assert unreadable.keys == [forged]


def test_the_all_tenant_cli_listing_lists_the_rest_and_says_what_it_left_out(
    client: Client, dynamodb: Any, settings: Settings, cli: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a good schedule, and a forged one whose time zone is a folder
    client.create_schedule("acme/good", "rate(1 hour)", LogAction(message="good"))
    forged = forge_schedule(dynamodb, settings, "beta/forged", timezone="Europe")
    capsys.readouterr()

    # When the operator lists every tenant's schedules
    code = cli("schedules", "list")

    # Then the good one is listed, and stderr says one item was left out, naming it
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith("acme/good  ACTIVE")
    assert "forged" not in out
    assert "Traceback" not in err
    assert "1 stored item(s) left out of the schedules listed" in err
    assert forged in err


def test_the_poll_quarantines_a_schedule_with_a_folder_for_a_zone_once(
    client: Client, dynamodb: Any, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a good schedule, and a forged one whose time zone is a folder, both due in the index
    client.create_schedule("acme/good", "rate(1 hour)", LogAction(message="good"))
    forged = forge_schedule(dynamodb, settings, "acme/forged", timezone="America")
    store = DynamoStores.from_settings(dynamodb, settings)
    poller = poller_on(store, RecordingInvoker(), settings)

    # When two polls run
    with caplog.at_level(logging.INFO):
        first = poller.poll(FIXED_NOW_MS + 1_000)
        second = poller.poll(FIXED_NOW_MS + 2_000)

    # Then the first took the forged item out of the due index (its detail kept), the second did not meet it
    assert (first.undecodable, second.undecodable) == (1, 0)
    item = dynamodb.get_item(TableName=settings.table_name, Key={"task_id": {"S": forged}}, ConsistentRead=True)
    assert "due_bucket" not in item["Item"]
    assert "unknown time zone 'America'" in item["Item"]["detail"]["S"]
    # ... it was logged once, with its key, and no traceback was
    about = [r for r in caplog.records if forged in r.getMessage()]
    assert len(about) == 1
    assert about[0].exc_info is None
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records if r.exc_info]


# -- a task item too deeply nested to read -------------------------------------------------------------------------
def test_a_task_that_cannot_be_read_is_left_out_of_every_listing_and_counted(
    api: LocalApi,
    client: Client,
    dynamodb: Any,
    settings: Settings,
    cli: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given acme's good task, and a forged one whose action is nested too deeply to read
    client.schedule(from_ms(FIXED_NOW_MS + 30_000), LogAction(message="good"), task_id="acme/good")
    forge_task(dynamodb, settings, client, "acme/deep", action={"S": DEEP})

    # When acme lists its tasks through the API  Then the good one is listed, the other counted
    status, body = call(api, "GET", "/v1/tasks")
    assert (status, body["unreadable"], [t["task_id"] for t in body["tasks"]]) == (200, 1, ["good"])
    unreadable = Unreadable()
    assert [t.task_id for t in ApiClient(api.url, token="token-acme").list(unreadable=unreadable)] == ["good"]
    assert unreadable.count == 1
    # ... and the operator's punctual list lists the good one and names the other on stderr
    capsys.readouterr()
    code = cli("list")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith("acme/good  ")
    assert "acme/deep" not in out
    assert "1 stored item(s) left out of the tasks listed" in err
    assert "acme/deep" in err


def test_an_executor_arms_a_batch_past_a_task_that_cannot_be_read(
    client: Client, dynamodb: Any, settings: Settings
) -> None:
    # Given a good task and a forged one nested too deeply to read, in one batch
    good = client.schedule(from_ms(FIXED_NOW_MS + 30_000), LogAction(message="good"), task_id="good")
    forge_task(dynamodb, settings, client, "deep", action={"S": DEEP})
    store = DynamoStores.from_settings(dynamodb, settings)
    due = good.due_ms
    requests = [
        ArmRequest(task_id="deep", due_ms=due, lease_until_ms=due + 60_000),
        ArmRequest(task_id="good", due_ms=due, lease_until_ms=due + 60_000),
    ]

    # When an executor arms the batch
    armed = store.firing.arm_many(requests, "batch-1", "executor-1", FIXED_NOW_MS)

    # Then the good task is armed, and the unreadable one recorded FAILED with a detail
    assert armed[0] is None
    assert armed[1] is not None
    assert armed[1].task.task_id == "good"
    item = dynamodb.get_item(TableName=settings.table_name, Key={"task_id": {"S": "deep"}}, ConsistentRead=True)
    assert item["Item"]["status"]["S"] == "FAILED"
    assert "RecursionError" in item["Item"]["detail"]["S"]


# -- input the API refuses with a 4xx -------------------------------------------------------------------------------
SCHEDULE = {"schedule_id": "s", "expression": "rate(1 hour)", "action": {"kind": "log", "message": "m"}}


@pytest.mark.parametrize("zone", ["America", "Europe", "Etc", "America/", "right"])
def test_a_folder_for_a_time_zone_is_a_422_on_create_and_on_change(api: LocalApi, client: Client, zone: str) -> None:
    client.create_schedule("acme/s", "rate(1 hour)", LogAction(message="m"))
    status, body = call(
        api, "POST", "/v1/schedules", json.dumps({**SCHEDULE, "schedule_id": "t", "timezone": zone}).encode()
    )
    assert (status, body.get("field")) == (422, "timezone"), body
    status, body = call(api, "PATCH", "/v1/schedules/s", json.dumps({"timezone": zone}).encode())
    assert (status, body.get("field")) == (422, "timezone"), body


@pytest.mark.parametrize(
    ("expression", "start_at", "zone"),
    [
        ("cron(59 23 31 12 ? 9999)", "9999-12-31T00:00:00Z", "America/Los_Angeles"),  # its one time is in 10000 UTC
        ("cron(0 * * * ? *)", "9999-12-31T23:30:00Z", "UTC"),  # the next hour is in 10000
        ("*/5 * * * *", "9999-12-31T23:58:00Z", "Pacific/Kiritimati"),  # the start's wall time is in 10000
    ],
)
def test_a_cron_schedule_with_no_time_before_the_year_10000_is_a_422(
    api: LocalApi, expression: str, start_at: str, zone: str
) -> None:
    body = {**SCHEDULE, "expression": expression, "start_at": start_at, "timezone": zone}
    status, answer = call(api, "POST", "/v1/schedules", json.dumps(body).encode())
    assert (status, answer.get("field")) == (422, "expression"), answer


@pytest.mark.parametrize("path", ["/v1/tasks", "/v1/schedules"])
def test_an_integer_of_thousands_of_digits_is_a_400_naming_the_body(api: LocalApi, path: str) -> None:
    body = b'{"payload": ' + b"7" * 5_000 + b', "due_at": "2030-06-01T12:10:00Z"}'
    status, answer = call(api, "POST", path, body)
    assert (status, answer.get("field")) == (400, "body"), answer
    assert "digits" in answer["detail"]
