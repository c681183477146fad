"""Races on the life-cycle conditional writes, with real threads against DynamoDB Local.

Every state change is one conditional write on the base table (see the docstring of
``punctual.repository``): these tests let real threads (each with its own boto3 client) collide on the same
items and assert the invariants that the conditions must keep - one winner per claim, one batch per task,
one fire per task for a duplicated delivery, and never a task both cancelled and armed.

Only counts and states are asserted, never how long anything took.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from punctual.actions import FireLog
from punctual.client import Client
from punctual.clock import OffsetProbe, SystemClock
from punctual.dynamodb.store import DynamoTaskStore
from punctual.errors import TaskStateError
from punctual.events import BatchEvent, BatchReport
from punctual.executor import Executor
from punctual.keys import bucket_start
from punctual.model import Candidate, LogAction, Task, TaskStatus
from punctual.poller import Poller
from punctual.settings import Settings
from punctual_tools.demo import read_fires
from support import (
    RecordingInvoker,
    candidate_of,
    create_all,
    due_candidates,
    make_tasks,
    now_ms,
    repo_for,
    run_threads,
)

SHARDS = 4
CLAIM_LEASE_MS = 30_000
JOIN_TIMEOUT_S = 120


# -- helpers -------------------------------------------------------------------------------------------------
def log_tasks(prefix: str, count: int, due_ms: Callable[[int], int]) -> list[Task]:
    """``count`` log tasks, the i-th due at ``due_ms(i)``."""
    return make_tasks(prefix, [due_ms(i) for i in range(count)], LogAction(message=prefix))


def claim_each(repo: DynamoTaskStore, tasks: list[Task], batch_id: str, poller_id: str) -> dict[str, bool]:
    """Claim every task (as PENDING, now) into ``batch_id``, last due first; whether each claim won."""
    return {
        t.task_id: repo.claim(candidate_of(t), batch_id, poller_id, now_ms(), CLAIM_LEASE_MS) for t in reversed(tasks)
    }


def cancel_each(repo: DynamoTaskStore, tasks: list[Task]) -> dict[str, TaskStatus | None]:
    """Cancel every task, first due first: None where the cancel won, else the status of the task that refused it."""
    outcome: dict[str, TaskStatus | None] = {}
    for task in tasks:
        try:
            repo.cancel(task.task_id, now_ms())
            outcome[task.task_id] = None
        except TaskStateError as exc:
            outcome[task.task_id] = exc.task.status
    return outcome


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


# -- claim -----------------------------------------------------------------------------------------------------
@pytest.mark.timeout(180)
def test_sixteen_claimers_racing_for_500_tasks_leave_exactly_one_winner_each(
    ddb_local_client: Any, local_table: str, settings: Settings
) -> None:
    # Given 500 PENDING tasks
    base = now_ms() + 60_000
    tasks = log_tasks("race", 500, lambda i: base + 37 * i)
    create_all(repo_for(settings), tasks)
    # ... and 16 claimers, each with its own client, batch id and poller id, each going through all 500 in an
    # order of its own
    claimers = 16
    repos = [repo_for(settings) for _ in range(claimers)]
    batch_ids = [f"batch-{k:02d}-{uuid.uuid4().hex[:6]}" for k in range(claimers)]

    def claim_all(k: int) -> dict[str, bool]:
        order = tasks[k * 31 % len(tasks) :] + tasks[: k * 31 % len(tasks)]
        if k % 2:
            order.reverse()
        won = {}
        for task in order:
            won[task.task_id] = repos[k].claim(
                candidate_of(task), batch_ids[k], f"poller-{k:02d}", now_ms(), CLAIM_LEASE_MS
            )
        return won

    # When they all claim at once
    results = run_threads([lambda k=k: claim_all(k) for k in range(claimers)], timeout=JOIN_TIMEOUT_S)

    # Then every task has exactly one winner
    winners: dict[str, list[int]] = {t.task_id: [] for t in tasks}
    for k, won in enumerate(results):
        assert len(won) == len(tasks)
        for task_id, ok in won.items():
            if ok:
                winners[task_id].append(k)
    assert sum(sum(won.values()) for won in results) == len(tasks)
    assert {task_id: len(ks) for task_id, ks in winners.items() if len(ks) != 1} == {}
    # ... and the table agrees: the task is CLAIMED by its winner's batch and poller, claimed once
    items = raw_items(ddb_local_client, local_table, [t.task_id for t in tasks])
    for task_id, item in items.items():
        (k,) = winners[task_id]
        assert (item["status"], item["batch_id"], item["claimed_by"], item["attempt"]) == (
            "CLAIMED",
            batch_ids[k],
            f"poller-{k:02d}",
            "1",
        ), task_id


@pytest.mark.timeout(120)
def test_concurrent_creates_of_the_same_task_store_it_once(
    ddb_local_client: Any, local_table: str, settings: Settings
) -> None:
    # Given 30 tasks, and 8 clients that all schedule each of them (the same id, the same content)
    base = now_ms() + 60_000
    tasks = log_tasks("same", 30, lambda i: base + i)
    repos = [repo_for(settings) for _ in range(8)]

    def create_each(k: int) -> list[bool]:
        return [repos[k].create(task, now_ms())[1] for task in (tasks if k % 2 else tasks[::-1])]

    # When they race
    results = run_threads([lambda k=k: create_each(k) for k in range(len(repos))], timeout=JOIN_TIMEOUT_S)

    # Then each task was created exactly once (the others got the existing task back) and is PENDING
    created = Counter()
    for k, flags in enumerate(results):
        for task, flag in zip(tasks if k % 2 else tasks[::-1], flags, strict=True):
            created[task.task_id] += flag
    assert set(created.values()) == {1}
    items = raw_items(ddb_local_client, local_table, [t.task_id for t in tasks])
    assert {item["status"] for item in items.values()} == {"PENDING"}


# -- poll ------------------------------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_two_pollers_polling_the_same_instant_put_each_task_in_exactly_one_batch(
    ddb_local_client: Any, local_table: str, settings: Settings
) -> None:
    # Given 200 tasks due within the poll window (scheduled through the client), small batches
    start = now_ms()
    client = Client(settings)
    ids = [
        client.schedule(
            datetime.fromtimestamp((start + 10_000 + 150 * i) / 1000, UTC),
            LogAction(message="poll"),
            {"i": i},
            task_id=f"poll-{i:04d}",
        ).task_id
        for i in range(200)
    ]
    poll_settings = settings.model_copy(update={"max_batch_size": 40})
    invokers = [RecordingInvoker(), RecordingInvoker()]
    pollers = [
        Poller(repo_for(settings), invoker, poll_settings, poller_id=f"poller-{k}")
        for k, invoker in enumerate(invokers)
    ]

    # When both poll the same instant at the same time
    at = now_ms()
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
    # Given 40 log tasks due in about 2 s, claimed by a poller into one batch
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


# -- cancel, reschedule against claim and arm ------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_cancel_racing_claim_never_leaves_a_task_both_cancelled_and_armed(
    ddb_local_client: Any, local_table: str, settings: Settings
) -> None:
    # Given 200 PENDING tasks
    base = now_ms() + 60_000
    tasks = log_tasks("cxl", 200, lambda i: base + 11 * i)
    create_all(repo_for(settings), tasks)
    canceller, claimer, armer = (repo_for(settings) for _ in range(3))
    batch_id = f"batch-{uuid.uuid4().hex[:8]}"

    # When one thread cancels every task while another claims every task (in the opposite order)
    cancel_lost_to, claimed = run_threads(
        [lambda: cancel_each(canceller, tasks), lambda: claim_each(claimer, tasks, batch_id, "poller-x")],
        timeout=JOIN_TIMEOUT_S,
    )

    # Then every task is cancelled: a claim either lost to an earlier cancel or was overridden by a later one
    # (a CLAIMED task can still be cancelled; per the repository docstring, its executor then loses at ARM)
    assert {task_id: status for task_id, status in cancel_lost_to.items() if status is not None} == {}
    # ... so arming every claimed task afterwards fails for each of them
    armed = {
        task_id: armer.arm(task_id, batch_id, "x-late", now_ms() + 120_000) for task_id, ok in claimed.items() if ok
    }
    assert {task_id: task for task_id, task in armed.items() if task is not None} == {}
    # ... and no task is both cancelled and armed: all are CANCELLED and out of the due index
    items = raw_items(ddb_local_client, local_table, [t.task_id for t in tasks])
    assert {item["status"] for item in items.values()} == {"CANCELLED"}
    assert not any("due_bucket" in item or "batch_id" in item for item in items.values())
    assert not any("armed_by" in item for item in items.values())


@pytest.mark.timeout(120)
def test_cancel_racing_arm_has_exactly_one_winner_per_task(
    ddb_local_client: Any, local_table: str, settings: Settings
) -> None:
    # Given 120 tasks claimed into one batch
    base = now_ms() + 60_000
    tasks = log_tasks("arm", 120, lambda i: base + 11 * i)
    repo = repo_for(settings)
    create_all(repo, tasks)
    batch_id = f"batch-{uuid.uuid4().hex[:8]}"
    assert all(repo.claim(candidate_of(t), batch_id, "poller-y", now_ms(), CLAIM_LEASE_MS) for t in tasks)
    canceller, armer = repo_for(settings), repo_for(settings)

    def arm_all() -> dict[str, bool]:
        return {
            t.task_id: armer.arm(t.task_id, batch_id, "x-1", t.due_ms + 120_000) is not None for t in reversed(tasks)
        }

    # When one thread cancels while another arms (in the opposite order)
    cancel_lost_to, armed = run_threads([lambda: cancel_each(canceller, tasks), arm_all], timeout=JOIN_TIMEOUT_S)

    # Then per task exactly one of them won
    for task in tasks:
        cancel_won = cancel_lost_to[task.task_id] is None
        assert cancel_won != armed[task.task_id], task.task_id
        if not cancel_won:
            assert cancel_lost_to[task.task_id] is TaskStatus.ARMED
    # ... and the table says who: ARMED by the executor, or CANCELLED - never both
    items = raw_items(ddb_local_client, local_table, [t.task_id for t in tasks])
    for task_id, item in items.items():
        if armed[task_id]:
            assert (item["status"], item["armed_by"]) == ("ARMED", "x-1")
        else:
            assert item["status"] == "CANCELLED"
            assert "armed_by" not in item


@pytest.mark.timeout(120)
def test_reschedule_racing_claim_leaves_every_task_pending_at_its_new_time(
    ddb_local_client: Any, local_table: str, settings: Settings
) -> None:
    # Given 60 PENDING tasks
    base = now_ms() + 60_000
    tasks = log_tasks("move", 60, lambda i: base + 13 * i)
    create_all(repo_for(settings), tasks)
    mover, claimer, armer = (repo_for(settings) for _ in range(3))
    batch_id = f"batch-{uuid.uuid4().hex[:8]}"
    moved_by_ms = 120_000

    def reschedule_all() -> None:
        for task in tasks:
            mover.reschedule(task.task_id, task.due_ms + moved_by_ms, now_ms())

    # When one thread reschedules every task while another claims it at its old due time
    _, claimed = run_threads(
        [reschedule_all, lambda: claim_each(claimer, tasks, batch_id, "poller-z")], timeout=JOIN_TIMEOUT_S
    )

    # Then every task is PENDING at its new due time (a claim at the old time lost, or was undone)
    items = raw_items(ddb_local_client, local_table, [t.task_id for t in tasks])
    for task in tasks:
        item = items[task.task_id]
        assert (item["status"], int(item["due_ms"])) == ("PENDING", task.due_ms + moved_by_ms)
        assert "batch_id" not in item and "lease_until_ms" not in item
    # ... the old batch can arm none of them
    assert [t for t in tasks if claimed[t.task_id] and armer.arm(t.task_id, batch_id, "x-old", base + 600_000)] == []
    # ... and each can be claimed afresh at its new time, and is found by the due index there
    found = {
        c.task_id
        for bucket in {bucket_start(t.due_ms + moved_by_ms) for t in tasks} | {bucket_start(now_ms())}
        for shard in range(SHARDS)
        for c in due_candidates(armer, bucket, shard, base + 10 * 60_000)
    }
    assert found == {t.task_id for t in tasks}
    moved = [Candidate(t.task_id, t.due_ms + moved_by_ms, TaskStatus.PENDING, None, t.misfire_grace_ms) for t in tasks]
    assert all(armer.claim(c, "batch-new", "poller-z", now_ms(), CLAIM_LEASE_MS) for c in moved)
