"""Executor invocations throttled past their event age, under Lambda's rules: the real executor handler in the
local runtime's Lambda-profile worker processes, one of them at a time (reserved concurrency 1).

An async invoke answers 202 before Lambda's queue throttles the invocation; one that waits longer than its event
age is dropped unrun, and nothing tells the poller. The scenario shows the poller finding out all the same: the
next poll finds the tasks it sent still PENDING (not armed), and sends them again before they would fire late.
Every Lambda time (the timeout, the retry delays, the throttle backoff, the event age) is scaled alike, and so is
the poller's (its interval, lead and margin): what ages past what is what it would be in Lambda.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import pytest
from fault_tools import http_tasks, judge
from lambda_tools import LambdaExecutors, all_final

from punctual.config.settings import Settings
from punctual.domain.model import TaskStatus
from punctual.runtime.wiring import poller_on
from punctual_tools.local.lambda_rules import EXECUTOR_FUNCTION, read_function_limits
from punctual_tools.local.target import TargetServer
from support import RecordingInvoker, create_all, now_ms, one_batch, store_for, wait_until

pytestmark = pytest.mark.integration
SCALE = 0.1  # every Lambda time: a 300 s timeout is 30 s, retries after 6 and 12 s, a 60 s event age 6 s
EVENT_AGE_S = 60  # the least MaximumEventAgeInSeconds Lambda allows (the template's, at least a Timeout, would
# outlast any one batch: it takes a queue of several to age an event past it)


@pytest.mark.timeout(180)
def test_batches_throttled_behind_a_long_one_are_dropped_past_their_event_age_and_the_next_poll_sends_them_again(  # noqa: PLR0915 - one fault scenario told from Given to Then; its steps read in order
    make_settings: Callable[..., Settings],
    target: TargetServer,
    lambda_executors: Callable[..., LambdaExecutors],
) -> None:
    started = time.monotonic()
    # Given an executor function that may run once at a time, its events dropped after 60 s, every Lambda time
    # scaled by 0.1 (timeout 30 s, event age 6 s, throttle backoff from 0.1 s), warm; and a poller on the same
    # scale (every 6 s, a lead of 9 s, a fast-path margin of 1 s) sending batches of 4
    limits = replace(read_function_limits(EXECUTOR_FUNCTION), reserved_concurrency=1, max_event_age_s=EVENT_AGE_S)
    settings = make_settings(
        poll_interval_ms=round(60_000 * SCALE),
        lead_ms=round(90_000 * SCALE),
        fast_path_margin_ms=round(10_000 * SCALE),
        max_batch_size=4,
    )
    run = lambda_executors(settings, limits, prewarm=1, time_scale=SCALE, scale_timeout=True)
    assert run.invoker.concurrency == 1
    print(f"\n{limits.describe()}; every Lambda time x {SCALE:g}")
    run.warm(1)
    store = store_for(settings)
    # ... and one long batch, 3 tasks due 16 s ahead, armed by the one executor that may run: it holds them, and
    # the only slot, until then
    t0 = now_ms()
    long = http_tasks("long", [t0 + 16_000] * 3, target.url, grace_ms=120_000)
    create_all(store, long)
    found = RecordingInvoker()
    poller_on(store, found, settings.model_copy(update={"lead_ms": 60_000})).poll(now_ms())
    run.invoker.invoke_async(one_batch(found).model_dump(mode="json"))
    long_ids = [t.task_id for t in long]
    assert wait_until(
        lambda: all(t.status is TaskStatus.ARMED for t in store.client.get_many(long_ids).values()), 30
    ), run.log_tail()

    # When 12 tasks come due 3 to 6 s from now (3 of them with a grace of 1 s, the others of 2 minutes), and a
    # poll sends them in 3 batches
    t1 = now_ms()
    tight = http_tasks("tight", [t1 + 3_000 + 1_000 * i for i in range(3)], target.url, grace_ms=1_000)
    spread = http_tasks("spread", [t1 + 3_300 + 300 * i for i in range(9)], target.url, grace_ms=120_000)
    create_all(store, tight + spread)
    sent_ids = [t.task_id for t in tight + spread]
    poller = poller_on(store, run.invoker, settings)
    ticked = time.monotonic()
    polls = [poller.poll(now_ms())]
    first = polls[0]
    assert first.dispatched == len(sent_ids), first

    # Then they are throttled behind the long batch, back off, and are dropped unrun once the next try would come
    # past their event age; their tasks stay PENDING
    assert wait_until(lambda: run.invoker.stats["expired"] >= first.batches, timeout=60), run.invoker.stats
    dropped = dict(run.invoker.stats)
    assert dropped["throttles"] > first.batches, dropped
    assert dropped["completed"] == 0, dropped
    assert {t.status for t in store.client.get_many(sent_ids).values()} == {TaskStatus.PENDING}

    # When the poller polls on, every 6 s, until every task is done
    ids = long_ids + sent_ids
    interval_s = settings.poll_interval_ms / 1000
    deadline = time.monotonic() + 120
    while not all_final(store, ids) and time.monotonic() < deadline:
        ticked += interval_s
        time.sleep(max(0.0, ticked - time.monotonic()))
        polls.append(poller.poll(now_ms()))
    assert all_final(store, ids), f"{run.invoker.stats}\n{run.log_tail()}"
    assert run.invoker.wait_idle(60)

    # Then the next poll found every task it had sent still PENDING (TasksNotArmed), and sent each again: due
    # before the poll after it could, and sent a poll interval ago
    second = polls[1]
    assert (second.not_armed, second.held_back, second.dispatched) == (len(sent_ids), 0, len(sent_ids)), second
    # ... and every task ended fired once or MISSED past its grace: none lost, no extra fire
    stored = store.client.get_many(ids)
    missed = {i for i, t in stored.items() if t.status is TaskStatus.MISSED}
    assert {t.status for t in stored.values()} <= {TaskStatus.SUCCEEDED, TaskStatus.MISSED}
    assert missed <= {t.task_id for t in tight}, missed
    assert all("past its grace" in (stored[i].detail or "") for i in missed), [stored[i].detail for i in missed]
    title = "batches throttled past their event age behind a long one; polls send them again"
    verdict = judge(title, store, ids, target)
    stats = run.invoker.stats
    print(f"invoker: {stats}")
    print(
        "polls (dispatched / not armed / held back): "
        + ", ".join(f"{p.dispatched}/{p.not_armed}/{p.held_back}" for p in polls)
    )
    print(
        f"{first.batches} batches dropped past their age before the next poll, {stats['expired']} in all; "
        f"MISSED {len(verdict.explicitly_missed)} (grace 1 s), {len(verdict.late)} late; "
        f"run {time.monotonic() - started:.1f} s"
    )
