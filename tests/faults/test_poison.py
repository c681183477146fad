"""Fault: a poison task - its target always answers 500.

Without a retry policy a failed action is recorded FAILED at once. With one, it is retried per its policy (the
same occurrence, the same idempotency key), then FAILED and sent to the dead-letter queue once; a redrive puts
it back to PENDING, idempotently.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from fault_tools import http_tasks, judge

from punctual.config.settings import Settings
from punctual.domain.model import TaskStatus
from punctual.domain.retry import RetryPolicy
from punctual.executing.executor import Executor
from punctual.runtime.wiring import poller_on
from punctual.stores.dlq import FileDeadLetterQueue
from punctual_tools.local.target import TargetServer
from support import RecordingInvoker, create_all, now_ms, store_for, wait_until

pytestmark = pytest.mark.integration


@pytest.mark.timeout(120)
def test_a_poison_task_ends_failed_and_is_neither_lost_nor_counted_as_a_duplicate(
    settings: Settings,
    target: TargetServer,
    make_executor: Callable[..., Executor],
) -> None:
    # Given 5 poison tasks (the target rejects their key every time) among 15 healthy ones, due in ~2.5 s
    due = now_ms() + 2_500
    tasks = http_tasks("poison", [due + 10 * i for i in range(20)], target.url)
    poison = [t.task_id for t in tasks[::4]]
    target.fail([f"{task_id}:0" for task_id in poison])
    ids = [t.task_id for t in tasks]
    create_all(store_for(settings), tasks)
    invoker = RecordingInvoker()
    poller_on(store_for(settings), invoker, settings).poll(now_ms())

    # When the batch runs
    for event in invoker.events:
        make_executor(store_for(settings), settings).run_batch(event)
    finished = wait_until(
        lambda: all(not t.status.is_active for t in store_for(settings).client.get_many(ids).values()), timeout=30
    )

    # Then the poison tasks are FAILED with the target's answer, the others SUCCEEDED
    assert finished
    stored = store_for(settings).client.get_many(ids)
    assert {task_id for task_id, t in stored.items() if t.status is TaskStatus.FAILED} == set(poison)
    assert all("500" in (stored[task_id].detail or "") for task_id in poison)
    # ... every request for a poison key was rejected; none is an extra
    verdict = judge("poison task (target always answers 500)", store_for(settings), ids, target)
    assert {f.key for f in verdict.rejected} == {f"{task_id}:0" for task_id in poison}
    assert not verdict.extra


@pytest.mark.timeout(120)
def test_a_poison_task_is_retried_per_its_policy_then_failed_and_dead_lettered(
    settings: Settings,
    target: TargetServer,
    make_executor: Callable[..., Executor],
    tmp_path: Path,
) -> None:
    # Given 3 poison tasks (their key always gets a 500) and 3 healthy ones, each allowed 3 attempts
    policy = RetryPolicy(max_attempts=3, backoff_ms=200, max_backoff_ms=400)
    tasks = http_tasks("retry", [now_ms() + 1_500 + 10 * i for i in range(6)], target.url, retry=policy)
    poison = [t.task_id for t in tasks[::2]]
    target.fail([f"{task_id}:0" for task_id in poison])
    ids = [t.task_id for t in tasks]
    create_all(store_for(settings), tasks)
    dead_letters = FileDeadLetterQueue(tmp_path / "dlq.jsonl")
    executor = make_executor(store_for(settings), settings, dead_letters=dead_letters)
    poller = poller_on(store_for(settings), RecordingInvoker(), settings)

    # When the poller and the executor run until every task has an outcome (each retry is a PENDING task
    # again, due after its backoff, which a later poll dispatches)
    def finished() -> bool:
        return all(not t.status.is_active for t in store_for(settings).client.get_many(ids).values())

    deadline = time.monotonic() + 60
    while not finished() and time.monotonic() < deadline:
        invoker = RecordingInvoker()
        poller._invoker = invoker  # a fresh recording invoker per poll
        poller.poll(now_ms())
        for event in invoker.events:
            executor.run_batch(event)
        time.sleep(0.2)

    # Then each poison task was tried exactly 3 times at the target, always with the same key, and is FAILED
    assert finished()
    stored = store_for(settings).client.get_many(ids)
    assert {task_id for task_id, t in stored.items() if t.status is TaskStatus.FAILED} == set(poison)
    assert {task_id for task_id, t in stored.items() if t.status is TaskStatus.SUCCEEDED} == set(ids) - set(poison)
    attempts = Counter(r.key for r in target.records() if (r.key or "").startswith("retry-"))
    assert {key: n for key, n in attempts.items() if (key or "").split(":")[0] in poison} == {
        f"{t}:0": 3 for t in poison
    }
    # ... one dead letter per poison task
    letters = dead_letters.receive()
    assert sorted(letter.task_id for letter in letters) == sorted(poison)
    # ... and the checker counts the attempts as rejected, none as an extra fire, nothing lost
    verdict = judge("poison task, 3 attempts, then FAILED + DLQ", store_for(settings), ids, target)
    assert len(verdict.rejected) == 9
    assert not verdict.extra

    # When they are redriven, twice
    first = store_for(settings).client.redrive_many(poison, now_ms())
    second = store_for(settings).client.redrive_many(poison, now_ms())
    # Then the first puts each back to PENDING with a fresh set of attempts; the second is a no-op
    assert first == [True] * 3
    assert second == [False] * 3
    assert all(
        t.status is TaskStatus.PENDING and t.attempt == 0 for t in store_for(settings).client.get_many(poison).values()
    )
