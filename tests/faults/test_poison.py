"""Fault: a poison task - its target always answers 500.

Today a failed action is recorded FAILED at once (no retries yet). With issue #4 part 1 it is retried per its
policy, then FAILED and sent to the dead-letter queue; that scenario waits for the retry policy.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fault_tools import CollectingInvoker, create_all, http_tasks, judge, now_ms, repo_for, wait_until

from punctual.executor import Executor
from punctual.local.target import TargetServer
from punctual.model import TaskStatus
from punctual.poller import Poller
from punctual.settings import Settings

pytestmark = pytest.mark.integration


@pytest.mark.timeout(120)
def test_a_poison_task_ends_failed_and_is_neither_lost_nor_counted_as_a_duplicate(
    settings: Settings, target: TargetServer, make_executor: Callable[..., Executor],
) -> None:
    # Given 5 poison tasks (the target rejects their key every time) among 15 healthy ones, due in ~2.5 s
    due = now_ms() + 2_500
    tasks = http_tasks("poison", [due + 10 * i for i in range(20)], target.url)
    poison = [t.task_id for t in tasks[::4]]
    target.fail([f"{task_id}:0" for task_id in poison])
    ids = [t.task_id for t in tasks]
    create_all(repo_for(settings), tasks)
    invoker = CollectingInvoker()
    Poller(repo_for(settings), invoker, settings).poll(now_ms())

    # When the batch runs
    for event in invoker.events():
        make_executor(repo_for(settings), settings).run_batch(event)
    finished = wait_until(lambda: all(not t.status.is_active for t in repo_for(settings).get_many(ids).values()),
                          timeout=30)

    # Then the poison tasks are FAILED with the target's answer, the others SUCCEEDED
    assert finished
    stored = repo_for(settings).get_many(ids)
    assert {task_id for task_id, t in stored.items() if t.status is TaskStatus.FAILED} == set(poison)
    assert all("500" in (stored[task_id].detail or "") for task_id in poison)
    # ... every request for a poison key was rejected; none is an extra
    verdict = judge("poison task (target always answers 500)", repo_for(settings), ids, target)
    assert {f.key for f in verdict.rejected} == {f"{task_id}:0" for task_id in poison}
    assert not verdict.extra


@pytest.mark.skip(reason="needs retries with a per-task policy and the dead-letter queue: issue #4 part 1 "
                         "(poison task -> FAILED after the policy's attempts, one DLQ message, redrive)")
def test_a_poison_task_is_retried_per_its_policy_then_failed_and_dead_lettered() -> None:
    """To write once retries land: attempts observed at the target == policy's max attempts, all with the same
    idempotency key and rejected; outcome FAILED; exactly one DLQ message; ``punctual redrive`` puts it back
    to PENDING once, idempotently; the checker's verdict counts the attempts as rejected, not extra."""
