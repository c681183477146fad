"""Races that need the poller or the executor, with real threads against DynamoDB Local: two pollers polling
the same instant, and one batch delivered to two executors at once.

The races on the store's conditional writes alone (claimers, creates, arms, cancels and reschedules colliding)
are part of the store contract: ``tests/contract/test_store_races.py``.

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
from punctual.events import BatchEvent, BatchReport
from punctual.executor import Executor
from punctual.model import LogAction, Task
from punctual.poller import Poller
from punctual.settings import Settings
from punctual_tools.demo import read_fires
from support import FIXED_NOW_MS, RecordingInvoker, create_all, make_tasks, now_ms, repo_for, run_threads

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
def test_two_pollers_polling_the_same_instant_put_each_task_in_exactly_one_batch(
    ddb_local_client: Any, local_table: str, settings: Settings
) -> None:
    # Given 200 tasks due within the poll window of one fixed instant (written then), small batches
    at = FIXED_NOW_MS
    tasks = log_tasks("poll", 200, lambda i: at + 10_000 + 150 * i)
    create_all(repo_for(settings), tasks, created_ms=at)
    ids = [t.task_id for t in tasks]
    poll_settings = settings.model_copy(update={"max_batch_size": 40})
    invokers = [RecordingInvoker(), RecordingInvoker()]
    pollers = [
        Poller(repo_for(settings), invoker, poll_settings, poller_id=f"poller-{k}")
        for k, invoker in enumerate(invokers)
    ]

    # When both poll that instant at the same time
    reports = run_threads([lambda p=p: p.poll(at) for p in pollers], timeout=JOIN_TIMEOUT_S)

    # Then every task is in exactly one batch payload of one of them
    seen = Counter()
    batch_of: dict[str, tuple[str, str]] = {}
    for invoker in invokers:
        for payload in invoker.payloads:
            event = BatchEvent.model_validate(payload)
            assert len(event.tasks) <= poll_settings.max_batch_size
            for task in event.tasks:
                seen[task.task_id] += 1
                batch_of[task.task_id] = (event.batch_id, event.claimed_by)
    assert set(seen) == set(ids)
    assert {task_id: n for task_id, n in seen.items() if n != 1} == {}
    # ... the reports add up: one claim per task, the other poller's attempt counted as a conflict
    assert sum(r.claimed for r in reports) == len(ids)
    assert sum(r.conflicts for r in reports) == len(ids)
    assert sum(r.batches for r in reports) == sum(len(i.payloads) for i in invokers)
    # ... and the table names the same batch and poller as the payload that carries the task
    items = raw_items(ddb_local_client, local_table, ids)
    assert {task_id: (item["batch_id"], item["claimed_by"]) for task_id, item in items.items()} == batch_of
    assert {item["status"] for item in items.values()} == {"CLAIMED"}


# -- arm: a batch delivered twice ------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_a_batch_delivered_twice_to_two_executors_fires_every_task_once(
    ddb_local_client: Any, local_table: str, settings: Settings, fire_log: Path
) -> None:
    # Given 40 log tasks due in about 2 s (a grace of minutes: late on a slow machine is still on time), claimed
    # by a poller into one batch
    n = 40
    prefix = f"dup-{uuid.uuid4().hex[:6]}-"
    due = now_ms() + 2_000
    tasks = log_tasks(prefix.rstrip("-"), n, lambda i: due + 5 * (i % 4))
    create_all(repo_for(settings), tasks)
    invoker = RecordingInvoker()
    Poller(repo_for(settings), invoker, settings).poll(now_ms())
    assert len(invoker.payloads) == 1
    event = BatchEvent.model_validate(invoker.payloads[0])
    assert len(event.tasks) == n
    # ... and two executors (two Lambda environments), each with its own client, on the real clock
    executors = [
        Executor(repo_for(settings), settings, SystemClock(), OffsetProbe(None, 0.5)) for _ in range(2)
    ]

    # When the same batch is delivered to both at once
    reports: list[BatchReport] = run_threads([lambda x=x: x.run_batch(event) for x in executors], timeout=90)

    # Then each task was armed by exactly one of them; the other lost it at ARM
    assert sum(r.armed for r in reports) == n
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
