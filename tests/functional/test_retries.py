"""Retries on moto: the RETRY write (ARMED by me → PENDING at the next try), and the executor trying a failing
HTTP action again per its policy until it succeeds or the attempts / the age run out."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.message import Message
from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.domain.clock import SystemClock
from punctual.domain.keys import index_key, shard_of
from punctual.domain.model import Task, TaskStatus
from punctual.domain.retry import RetryPolicy
from punctual.errors import InvalidTaskError, TaskConflictError
from punctual.executing.executor import Executor
from punctual.runtime.client import Client
from punctual.stores.dynamodb import DynamoStores
from punctual.targets import HttpAction, LogAction
from support import StubTarget, arm, read_task, retry_record, run_until_done, serving


class FlakyTarget(StubTarget):
    """Answers 500 to the first ``failures`` POSTs, then 200; keeps each request's idempotency key."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.keys: list[str] = []

    def answer(self, path: str, headers: Message, body: bytes) -> int:
        with self.lock:
            self.keys.append(headers["Idempotency-Key"])
            return 500 if len(self.keys) <= self.failures else 200


@pytest.fixture
def failing_twice() -> Iterator[FlakyTarget]:
    with serving(FlakyTarget(2)) as server:
        yield server


@pytest.fixture
def always_failing() -> Iterator[FlakyTarget]:
    with serving(FlakyTarget(10**6)) as server:
        yield server


def armed_task(store: DynamoStores, tasks: Any, now_ms: int, **fields: Any) -> Task:
    """A task due 10 s after ``now_ms``, armed by ``exec-1``."""
    task: Task = tasks.create(now_ms + 10_000, **fields)
    assert arm(store, task, "exec-1", now_ms, lease_until_ms=now_ms + 200_000) is not None
    return task


def test_retry_write_puts_the_task_back_to_pending_at_its_next_try(
    store: DynamoStores, tasks: Any, read_raw: Any, now_ms: int
) -> None:
    # Given a task armed by exec-1 (first attempt), whose action failed 10 s later
    task = armed_task(store, tasks, now_ms, retry=RetryPolicy(max_attempts=3))
    failed_at = now_ms + 10_005
    retry = retry_record(
        task,
        failed_at,
        "HTTP 500",
        retry_due_ms=failed_at + 700,
        fired_ms=now_ms + 10_000.5,
        drift_ms=0.5,
        retry_delay_ms=700,
    )
    # When exec-1 records the retry (in bulk, as the executor does)
    assert store.firing.record_many("exec-1", [retry]) == [True]
    # Then the task is PENDING, due at the next try, back in the due index under that instant's bucket,
    # flagged for the fast path, with its first due, attempt and last error kept, and no lease
    back = read_task(store, task.task_id)
    raw = read_raw(task.task_id)
    assert back.status is TaskStatus.PENDING
    assert back.due_ms == failed_at + 700
    assert raw["due_bucket"]["S"] == index_key(failed_at + 700, shard_of(task.task_id, store.config.shard_count))
    assert raw["fast_path"] == {"N": "1"}
    assert back.first_due_at == task.due_at
    assert back.attempt == 1
    assert back.detail == "HTTP 500"
    assert back.lease_until is None
    assert back.batch_id is None
    assert raw["content_hash"]["S"] == task.content_hash()  # what the client asked for is unchanged
    # And the next arm makes it attempt 2, its first due still the original one
    assert arm(store, back, "exec-2", failed_at + 700) is not None
    again = read_task(store, task.task_id)
    assert again.attempt == 2
    assert again.first_due_at == task.due_at


def test_a_second_retry_keeps_the_first_due(store: DynamoStores, tasks: Any, now_ms: int) -> None:
    # Given a task already retried once (first due = its original due), armed again by exec-1
    task = armed_task(store, tasks, now_ms, retry=RetryPolicy(max_attempts=3))
    first = retry_record(task, now_ms + 10_010, "e1", retry_due_ms=now_ms + 11_000)
    assert store.firing.record("exec-1", first)
    assert arm(store, read_task(store, task.task_id), "exec-2", now_ms + 11_000) is not None
    # When exec-2 records a second retry naming (wrongly) another first due
    second = retry_record(task, now_ms + 11_010, "e2", retry_due_ms=now_ms + 12_000, first_due_ms=now_ms + 11_000)
    assert store.firing.record("exec-2", second)
    # Then the first due written by the first retry stands
    assert read_task(store, task.task_id).first_due_at == task.due_at


def test_only_the_executor_that_armed_it_can_retry_it(store: DynamoStores, tasks: Any, now_ms: int) -> None:
    # Given a task armed by exec-1
    task = armed_task(store, tasks, now_ms, retry=RetryPolicy(max_attempts=3))
    record = retry_record(task, now_ms + 10_010, "e", retry_due_ms=now_ms + 11_000)
    # When another executor tries to write the retry
    # Then the condition refuses it and the task stays ARMED by exec-1
    assert store.firing.record_many("exec-2", [record]) == [False]
    assert read_task(store, task.task_id).status is TaskStatus.ARMED


def test_a_retry_write_repeated_by_botocore_counts_as_done(store: DynamoStores, tasks: Any, now_ms: int) -> None:
    # Given a retry written once (its response lost, say)
    task = armed_task(store, tasks, now_ms, retry=RetryPolicy(max_attempts=3))
    record = retry_record(task, now_ms + 10_010, "e", retry_due_ms=now_ms + 11_000)
    assert store.firing.record("exec-1", record)
    # When the very same write is sent again / Then it is recognised as applied, not as a lost race
    assert store.firing.record("exec-1", record)
    # But a different retry (another next try) is not
    other = retry_record(task, now_ms + 10_010, "e", retry_due_ms=now_ms + 12_000)
    assert not store.firing.record("exec-1", other)


def test_a_failing_action_is_retried_until_it_succeeds(
    executor: Executor, store: DynamoStores, tasks: Any, settings: Settings, failing_twice: FlakyTarget
) -> None:
    # Given a task whose target fails twice then answers 200, with up to 5 attempts 50 ms apart at most
    now = int(SystemClock().wall_ms())
    task = tasks.create(
        now + 300,
        "flaky",
        now_ms=now,
        action=HttpAction(url=failing_twice.url(), timeout_s=5, retry_transient=False),
        retry=RetryPolicy(max_attempts=5, backoff_ms=50, max_backoff_ms=50),
    )
    # When the poller and the executor run until it is finished
    reports = run_until_done(store, settings, executor, task.task_id, rounds=6)
    # Then it fired three times with the same idempotency key (same occurrence), and succeeded on attempt 3
    assert failing_twice.keys == ["flaky:0"] * 3
    assert [r.retried for r in reports] == [1, 1, 0]
    assert sum(r.fired for r in reports) == 3
    done = read_task(store, task.task_id)
    assert done.status is TaskStatus.SUCCEEDED
    assert done.attempt == 3
    assert done.first_due_at == task.due_at


def test_the_last_attempt_leaves_the_task_failed(
    executor: Executor, store: DynamoStores, tasks: Any, settings: Settings, always_failing: FlakyTarget
) -> None:
    # Given a task whose target always fails, with two attempts in all
    now = int(SystemClock().wall_ms())
    task = tasks.create(
        now + 300,
        "poison",
        now_ms=now,
        action=HttpAction(url=always_failing.url(), timeout_s=5, retry_transient=False),
        retry=RetryPolicy(max_attempts=2, backoff_ms=20),
    )
    # When the poller and the executor run until it is finished
    reports = run_until_done(store, settings, executor, task.task_id, rounds=4)
    # Then it fired twice and is FAILED, saying its attempts are spent
    assert always_failing.keys == ["poison:0"] * 2
    assert [(r.retried, r.failed) for r in reports] == [(1, 0), (0, 1)]
    done = read_task(store, task.task_id)
    assert done.status is TaskStatus.FAILED
    assert done.detail is not None
    assert "attempt 2 of 2 failed, no retry left" in done.detail
    assert done.attempt == 2


def test_no_retry_once_the_occurrence_is_older_than_max_age(
    executor: Executor, store: DynamoStores, tasks: Any, settings: Settings, always_failing: FlakyTarget
) -> None:
    # Given a failing task with attempts to spare, already 2 s overdue (within its grace), and a maximum age of
    # 1 s: whenever it fails, it is older than that (a task due now with a maximum age of 0 ms was retried on a
    # fast machine: failed within the millisecond it was due, it was exactly 0 ms old, which is still retried)
    now = int(SystemClock().wall_ms())
    task = tasks.create(
        now - 2_000,
        "too-old",
        now_ms=now,
        action=HttpAction(url=always_failing.url(), timeout_s=5, retry_transient=False),
        retry=RetryPolicy(max_attempts=5, backoff_ms=20, max_age_ms=1_000),
    )
    # When it runs
    reports = run_until_done(store, settings, executor, task.task_id, rounds=2)
    # Then it fired once and is FAILED
    assert len(always_failing.keys) == 1
    assert [r.failed for r in reports] == [1]
    assert read_task(store, task.task_id).status is TaskStatus.FAILED


def test_a_task_without_a_retry_policy_fails_at_once(
    executor: Executor, store: DynamoStores, tasks: Any, settings: Settings, always_failing: FlakyTarget
) -> None:
    # Given a failing task with no retry policy (the default)
    now = int(SystemClock().wall_ms())
    task = tasks.create(
        now + 300, "plain", now_ms=now, action=HttpAction(url=always_failing.url(), timeout_s=5, retry_transient=False)
    )
    # When it runs / Then it is FAILED after one fire, its detail the error alone (as before retries existed)
    run_until_done(store, settings, executor, task.task_id, rounds=2)
    done = read_task(store, task.task_id)
    assert done.status is TaskStatus.FAILED
    assert len(always_failing.keys) == 1
    assert done.detail is not None
    assert "HTTP 500" in done.detail
    assert "attempt" not in done.detail


def test_the_client_stores_a_retry_policy_as_part_of_the_task(dynamodb: Any, settings: Settings) -> None:
    # Given a client

    client = Client(settings, dynamodb=dynamodb)
    due = datetime.now(UTC) + timedelta(minutes=5)
    # When it schedules a task with a retry policy given as a dict
    task = client.schedule(due, LogAction(), task_id="r1", retry={"max_attempts": 4, "backoff_ms": 250})
    # Then it reads back with that policy; the same call again is idempotent, another policy a conflict
    got = client.get("r1")
    assert got is not None
    assert got.retry == RetryPolicy(max_attempts=4, backoff_ms=250) == task.retry
    assert client.schedule(due, LogAction(), task_id="r1", retry={"max_attempts": 4, "backoff_ms": 250}).task_id == "r1"
    with pytest.raises(TaskConflictError):
        client.schedule(due, LogAction(), task_id="r1", retry={"max_attempts": 5, "backoff_ms": 250})
    # And a bad policy is refused naming the field
    with pytest.raises(InvalidTaskError) as err:
        client.schedule(due, LogAction(), retry={"max_attempts": 0})
    assert err.value.field == "retry.max_attempts"
