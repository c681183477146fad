"""Faults around the poller: two pollers at once, a poller that dies between claim and invoke, scheduled rules
~119 s apart, and a due index that lags behind the table.

Polls run with an explicit ``now_ms`` (simulated where the scenario needs time to pass); executors run on the
real clock, on tasks whose due times are placed so that they are due in real time when the executor runs.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fault_tools import DroppingInvoker, InlineInvoker, LaggingIndex, http_tasks, judge

from punctual.executor import Executor
from punctual.keys import bucket_start
from punctual.model import TaskStatus
from punctual.poller import Poller
from punctual.settings import Settings
from punctual_tools.local.target import TargetServer
from support import RecordingInvoker, create_all, now_ms, repo_for, run_threads, wait_until

pytestmark = pytest.mark.integration


def run_all(make_executor: Callable[..., Executor], settings: Settings, invokers: list[RecordingInvoker]) -> None:
    """Run every collected batch, each on its own executor, all at once."""
    events = [event for invoker in invokers for event in invoker.events]
    executors = [make_executor(repo_for(settings), settings) for _ in events]
    if events:
        run_threads([lambda x=x, e=e: x.run_batch(e) for x, e in zip(executors, events, strict=True)])


# -- 2. two pollers in the same minute ----------------------------------------------------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize("write_batch", ["single", "transaction"])
def test_two_pollers_at_the_same_instant_and_a_third_later_in_the_minute_fire_each_task_once(
    write_batch: str, make_settings: Callable[..., Settings], target: TargetServer,
    make_executor: Callable[..., Executor],
) -> None:
    # Given 60 tasks due in ~5 s, and small batches
    settings = make_settings(write_batch=write_batch, max_batch_size=20)
    repo = repo_for(settings)
    due = now_ms() + 5_000
    tasks = http_tasks(f"two-{write_batch}", [due + 11 * i for i in range(60)], target.url)
    create_all(repo, tasks)
    invokers = [RecordingInvoker() for _ in range(3)]
    pollers = [Poller(repo_for(settings), inv, settings, poller_id=f"poller-{k}") for k, inv in enumerate(invokers)]

    # When two pollers poll the same instant at once (EventBridge fired the rule twice) ...
    at = now_ms()
    reports = run_threads([lambda p=p: p.poll(at) for p in pollers[:2]])
    # ... and a third polls 20 s later in the same minute, while the claims' leases are live
    third = pollers[2].poll(at + 20_000)
    run_all(make_executor, settings, invokers)

    # Then each task was claimed by exactly one of them, the third claimed nothing
    assert sum(r.claimed for r in reports) == len(tasks)
    assert third.claimed == 0 and not invokers[2].payloads
    batched = [t.task_id for inv in invokers for e in inv.events for t in e.tasks]
    assert sorted(batched) == sorted(t.task_id for t in tasks)
    # ... and each fired once
    judge(f"two pollers at one instant + a third in the minute ({write_batch})", repo,
          [t.task_id for t in tasks], target)


# -- 3. crash after claim, before invoke ----------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_a_claim_whose_batch_was_never_invoked_is_recovered_when_its_lease_expires_and_fires_once(
    make_settings: Callable[..., Settings], target: TargetServer, make_executor: Callable[..., Executor],
) -> None:
    # Given 40 tasks due in ~4 s, and a short claim lease (1 s)
    settings = make_settings(claim_lease_ms=1_000)
    repo = repo_for(settings)
    due = now_ms() + 4_000
    tasks = http_tasks("crash-claim", [due + 13 * i for i in range(40)], target.url)
    create_all(repo, tasks)

    # When a poll claims them and dies before invoking an executor (the batch is lost)
    t0 = now_ms()
    first = Poller(repo, DroppingInvoker(), settings).poll(t0)
    assert first.claimed == len(tasks)
    # ... a poll while the lease is live (at its last ms) leaves them alone ...
    invoker = RecordingInvoker()
    poller = Poller(repo_for(settings), invoker, settings)
    at_edge = poller.poll(t0 + settings.claim_lease_ms)
    # ... and a poll one ms after the lease ends recovers every one of them
    after = poller.poll(t0 + settings.claim_lease_ms + 1)
    run_all(make_executor, settings, [invoker])

    # Then
    assert (at_edge.claimed, at_edge.recovered) == (0, 0)
    assert (after.claimed, after.recovered) == (len(tasks), len(tasks))
    stored = repo.get_many([t.task_id for t in tasks])
    assert {t.status for t in stored.values()} == {TaskStatus.SUCCEEDED}
    assert {t.attempt for t in stored.values()} == {2}  # claimed twice
    judge("crash after claim, before invoke: lease expired, recovered", repo, [t.task_id for t in tasks], target)


# -- 6. a ~119 s gap between polls ----------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_tasks_due_in_a_119_s_gap_between_polls_fire_late_within_grace_or_are_missed_explicitly(
    settings: Settings, target: TargetServer, make_executor: Callable[..., Executor],
) -> None:
    # Given polls 119 s apart: the first (simulated) at t1 = now - 119 s, the next at t2 = now. The first
    # claims up to t1 + lead (90 s) = now - 29 s; tasks due after that and before t2 fall in the gap.
    # The executors run on the real clock, after t2: a gap task fires late by its overdue at t2 plus however
    # long this test takes to get there, so the graces leave that as much room as the gap allows (the tight
    # tasks: 22 s; the others: minutes).
    t2 = now_ms()
    t1 = t2 - 119_000
    assert t1 + settings.lead_ms == t2 - 29_000
    gap_ok = http_tasks("gap-ok", [t2 - 25_000 + 1_000 * i for i in range(12)], target.url,
                        grace_ms=600_000)  # 14-25 s overdue at t2: well within a 10 min grace
    gap_tight_late = http_tasks("gap-tight", [t2 - 2_000 + 100 * i for i in range(10)], target.url,
                                grace_ms=24_000)  # 1-2 s overdue at t2: within a 24 s grace
    gap_tight_missed = http_tasks("gap-missed", [t2 - 28_800 + 400 * i for i in range(10)], target.url,
                                  grace_ms=24_000)  # 25-29 s overdue at t2: past a 24 s grace
    ahead = http_tasks("gap-ahead", [t2 + 2_500 + 10 * i for i in range(10)], target.url, grace_ms=600_000)
    tasks = gap_ok + gap_tight_late + gap_tight_missed + ahead
    repo = repo_for(settings)
    create_all(repo, tasks, created_ms=t1 - 5_000)  # all written before the first poll
    invoker = RecordingInvoker()
    poller = Poller(repo, invoker, settings)

    # When the first poll runs at t1 and the next 119 s later, at t2 (= now: the executors run on the real clock)
    first = poller.poll(t1)
    second = poller.poll(t2)
    run_all(make_executor, settings, [invoker])

    # Then the first poll found nothing of the gap, the second reached back and took everything
    assert first.claimed == 0
    assert second.watermark_ms <= bucket_start(t1)
    assert second.missed == len(gap_tight_missed)
    assert second.claimed == len(gap_ok) + len(gap_tight_late) + len(ahead)
    stored = repo.get_many([t.task_id for t in tasks])
    assert {stored[t.task_id].status for t in gap_tight_missed} == {TaskStatus.MISSED}
    assert {stored[t.task_id].status for t in gap_ok + gap_tight_late + ahead} == {TaskStatus.SUCCEEDED}
    # ... and the target agrees: gap tasks fired late but within their grace, the rest explicitly MISSED
    verdict = judge("119 s between polls", repo, [t.task_id for t in tasks], target)
    assert set(verdict.explicitly_missed) == {f"{t.task_id}:0" for t in gap_tight_missed}
    assert {key for key, _ in verdict.late} >= {f"{t.task_id}:0" for t in gap_ok + gap_tight_late}
    assert not verdict.past_grace


# -- 8. the due index lags ------------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_a_task_whose_index_entry_lags_is_found_by_the_next_poll_and_fires_once(
    settings: Settings, target: TargetServer, make_executor: Callable[..., Executor],
) -> None:
    # Given 20 tasks due in ~3 s and 10 written overdue (due 8 s ago, a 90 s grace), none of them in the due
    # index yet (GSI writes lag), and 10 more that are
    now = now_ms()
    fresh = http_tasks("lag-fresh", [now + 3_000 + 10 * i for i in range(20)], target.url)
    overdue = http_tasks("lag-overdue", [now - 8_000 + 10 * i for i in range(10)], target.url, grace_ms=90_000)
    visible = http_tasks("lag-visible", [now + 3_000 + 10 * i for i in range(10)], target.url)
    tasks = fresh + overdue + visible
    repo = repo_for(settings, LaggingIndex)
    create_all(repo, tasks, created_ms=now)
    repo.hidden = frozenset(t.task_id for t in fresh + overdue)
    invoker = InlineInvoker(lambda: make_executor(repo_for(settings), settings))  # executors start at once
    poller = Poller(repo, invoker, settings)

    # When a poll runs while the index lags, and the next (a minute later) once it has caught up
    first = poller.poll(now)
    repo.hidden = frozenset()
    armed_or_done = (TaskStatus.ARMED, TaskStatus.SUCCEEDED)  # (done already, on a machine slower than 3 s)
    assert wait_until(lambda: all(t.status in armed_or_done for t in repo.get_many(
        [t.task_id for t in visible]).values()), timeout=60)  # the first batch's executor armed its tasks
    second = poller.poll(now + 60_000)
    invoker.join()

    # Then the first poll took only what it could see; the watermark stayed back and the next found the rest
    assert first.claimed == len(visible)
    assert second.watermark_ms <= bucket_start(now)
    assert second.claimed == len(fresh) + len(overdue)
    verdict = judge("due index lagging for one poll", repo, [t.task_id for t in tasks], target)
    assert len(verdict.matched) == len(tasks)
