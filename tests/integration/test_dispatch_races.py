"""Races that need the poller or the executor, with real threads against DynamoDB Local: two pollers polling
the same instant (each dispatches every task; the executors of all their batches arm each task once), and one
batch delivered to two executors at once.

The races on the store's conditional writes alone (executors arming and taking over, creates, cancels and
reschedules colliding) are part of the store contract: ``tests/contract/test_store_races.py``.

Only counts and states are asserted, never how long anything took; no property depends on the machine's
speed (the pollers and their batches' arms use one fixed instant; the executors' tasks have a misfire grace of
10 minutes).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.domain.events import BatchEvent, BatchReport
from punctual.domain.model import ArmRequest, Task
from punctual.runtime.wiring import poller_on
from punctual.targets import FireLog, LogAction
from punctual_tools.demo import read_fires
from support import FIXED_NOW_MS, RecordingInvoker, create_all, executor_on, make_tasks, now_ms, run_threads, store_for

SHARDS = 4
JOIN_TIMEOUT_S = 120
GENEROUS_GRACE_MS = 600_000  # far longer than any run of these tests: no task can turn MISSED on a slow machine


# -- helpers -------------------------------------------------------------------------------------------------
def log_tasks(prefix: str, count: int, due_ms: Callable[[int], int]) -> list[Task]:
    """``count`` log tasks, the i-th due at ``due_ms(i)``, with a generous misfire grace."""
    return make_tasks(prefix, [due_ms(i) for i in range(count)], LogAction(message=prefix), grace_ms=GENEROUS_GRACE_MS)


def raw_items(client: Any, table: str, task_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The stored items (consistent reads), attribute values flattened to plain strings."""

    def get(task_id: str) -> dict[str, Any]:
        item = client.get_item(TableName=table, Key={"task_id": {"S": task_id}}, ConsistentRead=True)["Item"]
        return {k: next(iter(v.values())) for k, v in item.items()}

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip(task_ids, pool.map(get, task_ids), strict=True))


@pytest.fixture
def settings(ddb_local: str, local_table: str) -> Settings:
    return Settings(endpoint_url=ddb_local, table_name=local_table, ntp_server=None, shard_count=SHARDS)


@pytest.fixture
def fire_log(tmp_path: Path) -> Iterator[Path]:
    """The log action's fire log, in a file of this test (unset again afterwards: it is process-wide)."""
    path = tmp_path / "fires.jsonl"
    FireLog.configure(str(path))
    try:
        yield path
    finally:
        FireLog.configure(None)


# -- poll ------------------------------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_two_pollers_polling_the_same_instant_dispatch_each_task_once_each_and_it_is_armed_once(
    ddb_local_client: Any, local_table: str, settings: Settings
) -> None:
    # Given 200 tasks due within the poll window of one fixed instant (written then), small batches
    at = FIXED_NOW_MS
    tasks = log_tasks("poll", 200, lambda i: at + 10_000 + 150 * i)
    create_all(store_for(settings), tasks, created_ms=at)
    ids = [t.task_id for t in tasks]
    poll_settings = settings.model_copy(update={"max_batch_size": 40})
    invokers = [RecordingInvoker(), RecordingInvoker()]
    pollers = [
        poller_on(store_for(settings), invoker, poll_settings, poller_id=f"poller-{k}")
        for k, invoker in enumerate(invokers)
    ]

    # When both poll that instant at the same time
    reports = run_threads([partial(p.poll, at) for p in pollers], timeout=JOIN_TIMEOUT_S)

    # Then each poller put every task in exactly one of its batches, with the due time it was found at
    events: list[BatchEvent] = []
    for invoker in invokers:
        seen: Counter[str] = Counter()
        for payload in invoker.payloads:
            event = BatchEvent.model_validate(payload)
            assert len(event.tasks) <= poll_settings.max_batch_size
            seen.update(task.task_id for task in event.tasks)
            events.append(event)
        assert seen == Counter(ids)
    due = {t.task_id: t.due_ms for t in tasks}
    assert all(task.due_ms == due[task.task_id] for event in events for task in event.tasks)
    # ... the reports add up: every task found and dispatched by each, none recovered, nothing left over
    assert [(r.candidates, r.dispatched, r.recovered, r.undispatched, r.complete) for r in reports] == [
        (len(ids), len(ids), 0, 0, True)
    ] * 2
    assert sum(r.batches for r in reports) == len(events)
    # ... and neither wrote anything to a task: all PENDING, without batch or owner
    items = raw_items(ddb_local_client, local_table, ids)
    assert {(item["status"], "batch_id" in item, "armed_by" in item) for item in items.values()} == {
        ("PENDING", False, False)
    }

    # When every batch of both is armed at that instant, each by a live executor of its own, all at once
    executors = [store_for(settings) for _ in events]
    assert all(store.firing.heartbeat(f"exec-{k}", at, at + GENEROUS_GRACE_MS) for k, store in enumerate(executors))

    def arm_batch(k: int, event: BatchEvent) -> list[str]:
        armed = executors[k].firing.arm_many(
            [
                ArmRequest(task_id=t.task_id, due_ms=t.due_ms, lease_until_ms=at + GENEROUS_GRACE_MS)
                for t in event.tasks
            ],
            event.batch_id,
            f"exec-{k}",
            at,
        )
        return [a.task.task_id for a in armed if a is not None]

    won = run_threads([partial(arm_batch, k, e) for k, e in enumerate(events)], timeout=JOIN_TIMEOUT_S)

    # Then each task was armed exactly once, by the executor of one of the two batches that carried it
    assert Counter(task_id for armed in won for task_id in armed) == Counter(ids)
    items = raw_items(ddb_local_client, local_table, ids)
    assert {
        task_id: (item["status"], item["armed_by"], item["batch_id"], item["attempt"])
        for task_id, item in items.items()
    } == {task_id: ("ARMED", f"exec-{k}", events[k].batch_id, "1") for k, armed in enumerate(won) for task_id in armed}


# -- arm: a batch delivered twice ------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_a_batch_delivered_twice_to_two_executors_fires_every_task_once(
    ddb_local_client: Any, local_table: str, settings: Settings, fire_log: Path
) -> None:
    # Given 40 log tasks due in about 2 s (a grace of minutes: late on a slow machine is still on time), found
    # by a poller and put in one batch
    n = 40
    prefix = f"dup-{uuid.uuid4().hex[:6]}-"
    due = now_ms() + 2_000
    tasks = log_tasks(prefix.rstrip("-"), n, lambda i: due + 5 * (i % 4))
    create_all(store_for(settings), tasks)
    invoker = RecordingInvoker()
    poller_on(store_for(settings), invoker, settings).poll(now_ms())
    assert len(invoker.payloads) == 1
    event = BatchEvent.model_validate(invoker.payloads[0])
    assert len(event.tasks) == n
    # ... and two executors (two Lambda environments), each with its own client, on the real clock
    executors = [executor_on(store_for(settings), settings) for _ in range(2)]

    # When the same batch is delivered to both at once
    reports: list[BatchReport] = run_threads([partial(x.run_batch, event) for x in executors], timeout=90)

    # Then each task was armed by exactly one of them (none taken over: both were alive); the other lost it at ARM
    assert sum(r.armed for r in reports) == n
    assert sum(r.taken_over for r in reports) == 0
    assert sum(r.lost_arm for r in reports) == n
    assert all(r.armed + r.lost_arm == n for r in reports)
    # ... every task fired exactly once (one fire-log line each) and was recorded SUCCEEDED by its owner
    fires = Counter(f["task_id"] for f in read_fires(fire_log, prefix))
    assert fires == Counter({t.task_id: 1 for t in tasks})
    assert sum(r.fired for r in reports) == sum(r.succeeded for r in reports) == n
    assert sum(r.not_recorded for r in reports) == 0
    items = raw_items(ddb_local_client, local_table, [t.task_id for t in tasks])
    assert {item["status"] for item in items.values()} == {"SUCCEEDED"}
    owners = {r.executor_id for r in reports}
    assert {item["armed_by"] for item in items.values()} <= owners
    assert not any("due_bucket" in item for item in items.values())
