"""Races that need the poller or the executor, with real threads against DynamoDB Local: two pollers polling
the same instant, one batch delivered to two executors at once, and two executors taking over one dead
executor's batch at once.

There are no claims any more: the poller writes nothing per task, and executors arm from PENDING (see the
docstring of ``punctual.dynamodb.store``). The races on the store's conditional writes alone (arms, cancels,
reschedules, creates colliding) belong to the store contract suite (``tests/contract``).

Only counts and states are asserted, never how long anything took; no property depends on the machine's
speed (the pollers poll one fixed instant; the executors' tasks have a misfire grace of 10 minutes).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from punctual.actions import FireLog
from punctual.clock import OffsetProbe, SystemClock
from punctual.dynamodb.store import EXECUTOR_PREFIX
from punctual.events import BatchEvent, BatchReport, BatchTask
from punctual.executor import Executor
from punctual.model import LogAction, Task
from punctual.poller import Poller
from punctual.settings import Settings
from punctual_tools.demo import read_fires
from support import FIXED_NOW_MS, RecordingInvoker, arm, create_all, make_tasks, now_ms, repo_for, run_threads

SHARDS = 4
JOIN_TIMEOUT_S = 120
GENEROUS_GRACE_MS = 600_000  # far longer than any run of these tests: no task can turn MISSED on a slow machine


# -- helpers -------------------------------------------------------------------------------------------------
def log_tasks(prefix: str, count: int, due_ms: Callable[[int], int]) -> list[Task]:
    """``count`` log tasks, the i-th due at ``due_ms(i)``, with a generous misfire grace."""
    return make_tasks(prefix, [due_ms(i) for i in range(count)], LogAction(message=prefix),
                      grace_ms=GENEROUS_GRACE_MS)


def raw_items(client: Any, table: str, task_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The stored items (consistent reads), attribute values flattened to plain strings."""

    def get(task_id: str) -> dict[str, Any]:
        item = client.get_item(TableName=table, Key={"task_id": {"S": task_id}}, ConsistentRead=True)["Item"]
        return {k: next(iter(v.values())) for k, v in item.items()}

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip(task_ids, pool.map(get, task_ids), strict=True))


def executors_for(settings: Settings, count: int) -> list[Executor]:
    """Executors (Lambda environments), each with its own client, on the real clock."""
    return [Executor(repo_for(settings), settings, SystemClock(), OffsetProbe(None, 0.5)) for _ in range(count)]


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
def test_two_pollers_polling_the_same_instant_each_dispatch_every_task_once_and_write_nothing(
    ddb_local_client: Any, local_table: str, settings: Settings
) -> None:
    # Given 200 tasks due within the poll window of one fixed instant (written then), small batches
    at = FIXED_NOW_MS
    tasks = log_tasks("poll", 200, lambda i: at + 10_000 + 150 * i)
    create_all(repo_for(settings), tasks, created_ms=at)
    ids = [t.task_id for t in tasks]
    before = raw_items(ddb_local_client, local_table, ids)
    poll_settings = settings.model_copy(update={"max_batch_size": 40})
    invokers = [RecordingInvoker(), RecordingInvoker()]
    pollers = [
        Poller(repo_for(settings), invoker, poll_settings, poller_id=f"poller-{k}")
        for k, invoker in enumerate(invokers)
    ]

    # When both poll that instant at the same time
    reports = run_threads([lambda p=p: p.poll(at) for p in pollers], timeout=JOIN_TIMEOUT_S)

    # Then each of them put every task in exactly one of its batches (the executors' ARM decides between them)
    for poller, invoker, report in zip(pollers, invokers, reports, strict=True):
        assert Counter(invoker.task_ids) == Counter(ids)
        assert all(len(event.tasks) <= poll_settings.max_batch_size for event in invoker.events)
        assert {event.claimed_by for event in invoker.events} == {poller.poller_id}
        assert (report.dispatched, report.batches) == (len(ids), len(invoker.payloads))
    # ... and neither wrote anything to a task: the table is as it was
    assert raw_items(ddb_local_client, local_table, ids) == before


# -- arm: a batch delivered twice ------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_a_batch_delivered_twice_to_two_executors_fires_every_task_once(
    ddb_local_client: Any, local_table: str, settings: Settings, fire_log: Path
) -> None:
    # Given 40 log tasks due in about 2 s (a grace of minutes: late on a slow machine is still on time),
    # dispatched by a poller in one batch
    n = 40
    prefix = f"dup-{uuid.uuid4().hex[:6]}-"
    due = now_ms() + 2_000
    tasks = log_tasks(prefix.rstrip("-"), n, lambda i: due + 5 * (i % 4))
    create_all(repo_for(settings), tasks)
    invoker = RecordingInvoker()
    Poller(repo_for(settings), invoker, settings).poll(now_ms())
    (event,) = invoker.events
    assert len(event.tasks) == n

    # When the same batch is delivered to two executors (two Lambda environments) at once
    reports: list[BatchReport] = run_threads([lambda x=x: x.run_batch(event) for x in executors_for(settings, 2)],
                                             timeout=90)

    # Then each task was armed by exactly one of them; the other lost it at ARM (and took nothing over: the
    # winner's heartbeat was alive)
    assert sum(r.armed for r in reports) == n
    assert sum(r.lost_arm for r in reports) == n
    assert all(r.armed + r.lost_arm == n and r.taken_over == 0 for r in reports)
    # ... every task fired exactly once (one fire-log line each) and was recorded SUCCEEDED by its owner
    fires = Counter(f["task_id"] for f in read_fires(fire_log, prefix))
    assert fires == Counter({t.task_id: 1 for t in tasks})
    assert sum(r.fired for r in reports) == sum(r.succeeded for r in reports) == n
    assert sum(r.not_recorded for r in reports) == 0
    items = raw_items(ddb_local_client, local_table, [t.task_id for t in tasks])
    assert {(item["status"], item["attempt"]) for item in items.values()} == {("SUCCEEDED", "1")}
    owners = {r.executor_id for r in reports}
    assert {item["armed_by"] for item in items.values()} <= owners
    assert not any("due_bucket" in item for item in items.values())


# -- takeover: two executors take over one dead executor's batch -----------------------------------------------
@pytest.mark.timeout(120)
def test_two_executors_taking_over_a_dead_executors_batch_at_once_take_each_task_once(
    ddb_local_client: Any, local_table: str, settings: Settings, fire_log: Path
) -> None:
    # Given 60 log tasks due in about 3 s, armed by an executor whose heartbeat ended a second ago (dead)
    n = 60
    prefix = f"take-{uuid.uuid4().hex[:6]}-"
    now = now_ms()
    due = now + 3_000
    tasks = log_tasks(prefix.rstrip("-"), n, lambda i: due + 5 * (i % 6))
    store = repo_for(settings)
    create_all(store, tasks, created_ms=now - 60_000)
    assert store.heartbeat("x-dead", now - 60_000, now - 1_000)
    assert all(arm(store, task, "x-dead", now - 60_000) is not None for task in tasks)
    event = BatchEvent(batch_id=f"b-{uuid.uuid4().hex[:8]}", claimed_by="poller-t",
                       tasks=[BatchTask(task_id=t.task_id, due_ms=t.due_ms, grace_ms=t.misfire_grace_ms)
                              for t in tasks])

    # When two executors get that batch at once (a poll's dispatch and the fast path's, or a duplicate delivery)
    reports: list[BatchReport] = run_threads([lambda x=x: x.run_batch(event) for x in executors_for(settings, 2)],
                                             timeout=90)

    # Then each task was taken over by exactly one of them (all due after the dead one's lease: none MISSED)
    assert sum(r.taken_over for r in reports) == sum(r.armed for r in reports) == n
    assert sum(r.lost_arm for r in reports) == n
    assert sum(r.missed for r in reports) == 0
    # ... fired exactly once, recorded SUCCEEDED by its new owner, taken over once (attempt 2: armed twice)
    fires = Counter(f["task_id"] for f in read_fires(fire_log, prefix))
    assert fires == Counter({t.task_id: 1 for t in tasks})
    items = raw_items(ddb_local_client, local_table, [t.task_id for t in tasks])
    assert {(item["status"], item["attempt"], item["taken_from"]) for item in items.values()} == \
        {("SUCCEEDED", "2", "x-dead")}
    assert {item["armed_by"] for item in items.values()} <= {r.executor_id for r in reports}
    # ... and the dead executor is marked taken over: it can never renew its heartbeat
    (dead,) = raw_items(ddb_local_client, local_table, [EXECUTOR_PREFIX + "x-dead"]).values()
    assert dead["taken_over"] is True
    assert not store.heartbeat("x-dead", now_ms(), now_ms() + 60_000)
