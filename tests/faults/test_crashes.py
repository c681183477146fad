"""Faults inside an executor: it dies after arming, it dies after firing but before recording, or it starts only
after the tasks' grace has passed.

Per the repository's docstring (the crash window): an ARMED task whose executor died keeps its lease until
due + grace + the longest action timeout + a margin; the poll after that records it MISSED with a detail
saying its executor was lost. It may have fired (then the target saw one fire, with its idempotency key) or
not; Punctual never fires it a second time. Polls after the lease run with an explicit, simulated ``now_ms``
rather than waiting out the lease.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from fault_tools import DiesAfterArm, DiesAfterFire, InlineInvoker, http_tasks, judge

from punctual.events import BatchEvent
from punctual.executor import Executor
from punctual.model import Task, TaskStatus
from punctual.poller import Poller
from punctual.settings import Settings
from punctual_tools.local.target import TargetServer
from support import RecordingInvoker, create_all, now_ms, repo_for, wait_until

pytestmark = pytest.mark.integration
HAS_MISFIRE_POLICY = "misfire_policy" in Task.model_fields


def claim_one_batch(settings: Settings, tasks: list[Task], at_ms: int | None = None) -> BatchEvent:
    invoker = RecordingInvoker()
    report = Poller(repo_for(settings), invoker, settings).poll(now_ms() if at_ms is None else at_ms)
    assert report.claimed == len(tasks)
    (event,) = invoker.events
    return event


def lease_ends(settings: Settings, task_ids: list[str]) -> list[int]:
    """The armed leases' last ms, in order (each task's lease follows its own due time)."""
    stored = repo_for(settings).get_many(task_ids).values()
    assert {t.status for t in stored} == {TaskStatus.ARMED}
    return sorted(int(t.lease_until.timestamp() * 1000) for t in stored if t.lease_until is not None)


# -- 4. crash after arm, before fire ------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_tasks_armed_by_an_executor_that_died_before_firing_are_recorded_missed_when_the_lease_ends(
    settings: Settings, target: TargetServer, make_executor: Callable[..., Executor],
) -> None:
    # Given 30 tasks due in ~60 s (far beyond what arming and stopping can take: none may fire), claimed into
    # one batch
    due = now_ms() + 60_000
    tasks = http_tasks("crash-arm", [due + 10 * i for i in range(30)], target.url)
    ids = [t.task_id for t in tasks]
    create_all(repo_for(settings), tasks)
    event = claim_one_batch(settings, tasks)

    # When an executor arms them, then its process dies before they are due (no release, no record reaches
    # the table: the real executor, stopped, over a store that the dead process can no longer write to)
    executor = make_executor(repo_for(settings, DiesAfterArm), settings)
    runner = threading.Thread(target=executor.run_batch, args=(event,), daemon=True)
    runner.start()
    assert wait_until(lambda: {t.status for t in repo_for(settings).get_many(ids).values()} == {TaskStatus.ARMED},
                      timeout=40, interval=0.05)
    executor.request_stop()
    runner.join(30)
    assert not runner.is_alive()
    assert now_ms() < due
    leases = lease_ends(settings, ids)
    assert leases[0] > due + tasks[0].misfire_grace_ms  # the armed lease outlives the grace
    # ... and polls run at the first lease's last ms, one ms after it, and one ms after the last lease
    invoker = RecordingInvoker()
    poller = Poller(repo_for(settings), invoker, settings)
    at_edge = poller.poll(leases[0])
    just_after = poller.poll(leases[0] + 1)
    after = poller.poll(leases[-1] + 1)

    # Then nothing was touched while the leases were live; after them every task is MISSED, none claimed again
    assert (at_edge.claimed, at_edge.missed) == (0, 0)
    assert (just_after.claimed, just_after.missed) == (0, 1)
    assert (after.claimed, after.missed) == (0, len(tasks) - 1)
    assert not invoker.payloads
    stored = repo_for(settings).get_many(ids)
    assert {t.status for t in stored.values()} == {TaskStatus.MISSED}
    assert all("executor was lost after arming" in (t.detail or "") for t in stored.values())
    # ... and the target saw no fire: all explicitly MISSED, none lost
    verdict = judge("crash after arm, before fire (skip policy)", repo_for(settings), ids, target)
    assert len(verdict.explicitly_missed) == len(tasks) and verdict.fires == 0


@pytest.mark.timeout(120)
@pytest.mark.skipif(not HAS_MISFIRE_POLICY, reason="needs the per-task misfire policy fire_late: issue #4 part 3")
def test_a_fire_late_task_whose_executor_died_after_arming_fires_once_late_when_its_lease_ends(
    settings: Settings, target: TargetServer, make_executor: Callable[..., Executor],
) -> None:
    # Given 10 fire_late tasks (grace 1 s) due 100 s ago, armed by an executor that died, whose armed lease
    # (due + grace + the longest action timeout + a margin) ran out 8 s ago
    now = now_ms()
    due = now - 100_000
    tasks = http_tasks("crash-arm-late", [due + 10 * i for i in range(10)], target.url, grace_ms=1_000,
                       misfire_policy="fire_late")
    ids = [t.task_id for t in tasks]
    repo = repo_for(settings)
    create_all(repo, tasks, created_ms=due - 10_000)
    event = claim_one_batch(settings, tasks, at_ms=due - 5_000)
    armed = repo.arm_many([(t.task_id, now - 8_000) for t in tasks], event.batch_id, "x-dead")
    assert all(armed)

    # When the next poll runs (now), with executors that start at once
    invoker = InlineInvoker(lambda: make_executor(repo_for(settings), settings))
    report = Poller(repo, invoker, settings).poll(now)
    invoker.join()

    # Then each was recovered and fired once, ~100 s late, flagged late (not MISSED)
    assert (report.recovered, report.missed) == (len(tasks), 0)
    stored = repo.get_many(ids)
    assert {t.status for t in stored.values()} == {TaskStatus.SUCCEEDED}
    assert all(getattr(t, "late", False) for t in stored.values())
    verdict = judge("crash after arm, before fire (fire_late policy)", repo, ids, target)
    assert len(verdict.late) == len(tasks) and not verdict.past_grace


# -- 5. crash after fire, before record -----------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_tasks_fired_by_an_executor_that_died_before_recording_are_missed_after_the_lease_and_never_refired(
    settings: Settings, target: TargetServer, make_executor: Callable[..., Executor],
) -> None:
    # Given 30 tasks due in ~3 s, claimed into one batch
    due = now_ms() + 3_000
    tasks = http_tasks("crash-fire", [due + 10 * i for i in range(30)], target.url)
    ids = [t.task_id for t in tasks]
    keys = [f"{task_id}:0" for task_id in ids]
    create_all(repo_for(settings), tasks)
    event = claim_one_batch(settings, tasks)

    # When an executor arms and fires them, and dies before its outcomes reach the table
    report = make_executor(repo_for(settings, DiesAfterFire), settings).run_batch(event)
    assert report.armed == len(tasks) and report.not_recorded == len(tasks)
    assert target.wait_for_keys(keys, timeout=5)
    # ... Lambda delivers the failed invocation again (at least once): a new executor gets the same batch
    retry = make_executor(repo_for(settings), settings).run_batch(event)
    # ... and the poll after the armed lease ends finds them
    leases = lease_ends(settings, ids)
    invoker = RecordingInvoker()
    after = Poller(repo_for(settings), invoker, settings).poll(leases[-1] + 1)

    # Then the redelivery armed nothing (they are ARMED by the dead executor, not CLAIMED) and fired nothing
    assert (retry.armed, retry.fired) == (0, 0)
    # ... the poll records them MISSED, saying they may have fired, and claims nothing again
    assert (after.claimed, after.missed) == (0, len(tasks))
    assert not invoker.payloads
    stored = repo_for(settings).get_many(ids)
    assert {t.status for t in stored.values()} == {TaskStatus.MISSED}
    assert all("may have fired" in (t.detail or "") for t in stored.values())
    # ... and the target saw each fire once: at most one extra per key is allowed here, none happened
    verdict = judge("crash after fire, before record", repo_for(settings), ids, target, allowance=keys)
    assert len(verdict.matched) == len(tasks) and not verdict.extra


# -- 7. executor started after the grace ----------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_an_executor_that_starts_after_the_grace_records_its_tasks_missed_without_firing(
    settings: Settings, target: TargetServer, make_executor: Callable[..., Executor],
) -> None:
    # Given 20 tasks with a 1 s grace, due 5 s ago, claimed on time (by a poll 6 s ago) into one batch
    now = now_ms()
    due = now - 5_000
    tasks = http_tasks("late-exec", [due + 10 * i for i in range(20)], target.url, grace_ms=1_000)
    ids = [t.task_id for t in tasks]
    create_all(repo_for(settings), tasks, created_ms=due - 10_000)
    event = claim_one_batch(settings, tasks, at_ms=due - 1_000)

    # When the executor starts only now (a cold start stuck, the async queue backed up), past their grace
    report = make_executor(repo_for(settings), settings).run_batch(event)

    # Then it armed them, fired none, and recorded each MISSED
    assert (report.armed, report.fired, report.missed) == (len(tasks), 0, len(tasks))
    stored = repo_for(settings).get_many(ids)
    assert {t.status for t in stored.values()} == {TaskStatus.MISSED}
    verdict = judge("executor started after the grace", repo_for(settings), ids, target)
    assert len(verdict.explicitly_missed) == len(tasks) and verdict.fires == 0

