"""Bulk scheduling (``Client.schedule_many``) and plain-boto3 writes (``Client.to_item``) on moto."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.domain.clock import SystemClock
from punctual.domain.keys import from_ms
from punctual.domain.model import TaskStatus
from punctual.runtime.client import Client
from punctual.runtime.wiring import poller_on
from punctual.stores.dynamodb import DynamoStores
from punctual.targets import HttpAction, LogAction
from punctual_tools.cli import main
from support import RecordingInvoker, executor_on, read_task

TABLE = "punctual-tasks-test"


def test_schedule_many_reports_each_task_and_stores_only_the_good_ones(
    client: Client, store: DynamoStores, now_ms: int
) -> None:
    # Given one task already stored, and a list mixing new, repeated, conflicting and bad tasks
    client.schedule(from_ms(now_ms + 60_000), LogAction(message="x"), {"n": 0}, task_id="t-0")
    specs: list[dict[str, Any]] = [
        {
            "due_at": from_ms(now_ms + 60_000 + i),
            "action": LogAction(message="x"),
            "payload": {"n": i},
            "task_id": f"t-{i}",
        }
        for i in range(1, 6)
    ]
    specs += [
        {
            "due_at": from_ms(now_ms + 60_000),
            "action": LogAction(message="x"),
            "payload": {"n": 0},
            "task_id": "t-0",
        },  # the same content again: exists
        {"due_at": from_ms(now_ms + 90_000), "action": LogAction(message="x"), "task_id": "t-0"},  # conflict
        {"due_at": from_ms(now_ms - 3_600_000), "action": LogAction(), "task_id": "too-late"},  # invalid due
        {"due_at": from_ms(now_ms + 1_000), "action": {"kind": "nope"}, "task_id": "bad-kind"},  # invalid action
        {"action": LogAction(), "task_id": "no-due"},  # missing field
        {"due_at": from_ms(now_ms + 1_000), "action": LogAction(), "colour": "red"},  # unknown field
    ]
    seen: list[tuple[int, int]] = []
    # When they are scheduled at once
    results = client.schedule_many(specs, threads=4, on_progress=lambda done, total: seen.append((done, total)))
    # Then there is one result per task, in order, saying what happened to it
    assert [r.index for r in results] == list(range(len(specs)))
    assert [r.outcome for r in results] == ["created"] * 5 + ["exists", "conflict"] + ["invalid"] * 4
    assert results[8].field == "action"
    assert results[7].field == "due_at"
    assert "unknown field(s) colour" in (results[10].error or "")
    assert all(r.task is not None and r.task.task_id == f"t-{i + 1}" for i, r in enumerate(results[:5]))
    # And only the good ones are stored; the conflict left the stored task as it was
    assert {t.task_id for t in store.client.list_tasks()} == {f"t-{i}" for i in range(6)}
    assert read_task(store, "t-0").due_ms == now_ms + 60_000
    # And progress was reported for every task, ending at the total
    assert len(seen) == len(specs)
    assert max(seen) == (len(specs), len(specs))


def test_schedule_many_is_idempotent_on_ids(client: Client, now_ms: int) -> None:
    specs = [{"due_at": from_ms(now_ms + 60_000), "action": LogAction(), "task_id": f"r-{i}"} for i in range(20)]
    first = client.schedule_many(specs)
    again = client.schedule_many(specs)
    assert {r.outcome for r in first} == {"created"}
    assert {r.outcome for r in again} == {"exists"}


def test_a_task_written_with_plain_put_item_fires(dynamodb: Any, store: DynamoStores, settings: Settings) -> None:
    # Given a task built and validated by the client, and written as an item with boto3's put_item
    clock = SystemClock()
    client = Client(settings, dynamodb=dynamodb)
    now = int(clock.wall_ms())
    task = client.build_task(from_ms(now + 500), LogAction(message="raw"), {"k": "v"}, task_id="raw-1")
    dynamodb.put_item(TableName=TABLE, Item=client.to_item(task), ConditionExpression="attribute_not_exists(task_id)")
    # When the poller finds it and an executor runs the batch
    invoker = RecordingInvoker()
    poller_on(store, invoker, settings).poll(now)
    (event,) = invoker.events
    report = executor_on(store, settings, clock).run_batch(event)
    # Then it fired once and is recorded SUCCEEDED, with the payload it was written with
    assert (report.armed, report.fired, report.succeeded) == (1, 1, 1)
    done = read_task(store, "raw-1")
    assert done.status is TaskStatus.SUCCEEDED
    assert done.payload == {"k": "v"}
    # And the client sees it as a task it scheduled (idempotent on the same content)
    assert client.schedule(task.due_at, LogAction(message="raw"), {"k": "v"}, task_id="raw-1").task_id == "raw-1"


def test_to_item_is_what_schedule_stores(client: Client, dynamodb: Any, now_ms: int) -> None:
    # Given the same task through both doors
    task = client.build_task(from_ms(now_ms + 60_000), HttpAction(url="https://example.com/h"), [1, 2], task_id="same")
    item = client.to_item(task, now_ms)
    client.schedule(task.due_at, task.action, task.payload, task_id="same")
    stored = dynamodb.get_item(TableName=TABLE, Key={"task_id": {"S": "same"}})["Item"]
    # Then the items are equal
    assert item == stored


def test_cli_schedule_many_schedules_a_file_and_reports_the_refusals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], dynamodb: Any
) -> None:
    # Given a JSON-lines file of three good tasks, one in the long past, and one with an unknown action kind
    for name in [n for n in os.environ if n.startswith("PUNCTUAL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PUNCTUAL_TABLE_NAME", TABLE)
    monkeypatch.setenv("PUNCTUAL_REGION", "us-east-1")
    soon = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    lines = [
        {"due_at": soon, "action": {"kind": "log", "message": "m"}, "payload": {"i": i}, "task_id": f"f-{i}"}
        for i in range(3)
    ]
    lines += [
        {"due_at": "2001-01-01T00:00:00+00:00", "action": {"kind": "log"}, "task_id": "old"},
        {"due_at": soon, "action": {"kind": "sms"}, "task_id": "sms"},
    ]
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    # When the CLI schedules the file
    code = main(["--home", str(tmp_path / "home"), "schedule-many", str(path), "--aws", "--json", "--quiet"])
    out, err = capsys.readouterr()
    # Then it exits 1 (not all were taken), counts each outcome, and names each refused task with its reason
    assert code == 1
    assert json.loads(out.strip().splitlines()[-1]) == {
        "total": 5,
        "created": 3,
        "exists": 0,
        "invalid": 2,
        "conflict": 0,
        "error": 0,
    }
    assert "task 4 (old): invalid" in err
    assert "MISSED" in err
    assert "task 5 (sms): invalid" in err
    assert "unknown action kind" in err
    # And the good ones are stored
    assert all(dynamodb.get_item(TableName=TABLE, Key={"task_id": {"S": f"f-{i}"}}).get("Item") for i in range(3))


def test_cli_schedule_many_refuses_a_line_that_is_not_an_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dynamodb: Any
) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"due_at": "2030-01-01T00:00:00+00:00", "action": {"kind": "log"}}\n[1, 2]\n')
    code = main(["--home", str(tmp_path / "home"), "schedule-many", str(path), "--aws", "--quiet"])
    assert code == 2
    assert f"{path}:2: each line must be a JSON object" in capsys.readouterr().err
