"""Faults under Lambda's rules: the real executor handler (src/executor/app.py) in the local runtime's worker
processes under the Lambda profile (CPU quota, timeout kill, frozen while idle, async retries, throttling, event
age), and two store faults in-process (a record write throttled, unprocessed BatchGetItem keys).

The invoker's scenarios take the executor's limits from the template. The timeout scenario scales every Lambda
time alike (timeout, retry delays, event age: :func:`lambda_tools.scale_to`), so that whether a timed-out
invocation is retried is what it would be in Lambda; the others run Lambda's delays at :data:`lambda_tools.SCALE`
with the template's event age in real seconds (:func:`lambda_tools.executor_limits`). Each scenario ends with the
checker's verdict (:func:`fault_tools.judge`): nothing lost, no unexplained extra, and a MISSED task only where
the scenario explains it (an executor's crash window).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from fault_tools import (
    SHORT_LEASE,
    InlineInvoker,
    alive_until,
    crash_windows,
    dead_for_good,
    http_tasks,
    judge,
    put_all,
    report_figures,
    takeover_marks,
)
from lambda_tools import (
    LambdaExecutors,
    all_final,
    executor_limits,
    finish_with_polls,
    heartbeats,
    scale_to,
)

from punctual.config.settings import Settings
from punctual.domain.model import FireRecord, TaskStatus
from punctual.executing.executor import Executor
from punctual.runtime.wiring import poller_on
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.dynamodb.codec import text_of
from punctual.stores.dynamodb.executors import Executors
from punctual_tools.local.dynamodb_local import make_client
from punctual_tools.local.invoker import LocalInvoker
from punctual_tools.local.lambda_rules import (
    EXECUTOR_FUNCTION,
    FunctionLimits,
    read_function_limits,
    retries_after_timeouts,
    retry_delay_s,
)
from punctual_tools.local.target import TargetServer
from support import RecordingInvoker, create_all, now_ms, one_batch, store_for, wait_until

pytestmark = pytest.mark.integration


# -- 1. a timeout mid-batch, and Lambda's retries of the invocation as its event age allows ---------------------
TIMEOUT_S = 20  # the executor's Timeout in real seconds: every Lambda time is scaled by TIMEOUT_S / Timeout


@pytest.mark.slow
@pytest.mark.timeout(360)
@pytest.mark.parametrize("event_age", ["template", "room for both retries"])
def test_an_executor_killed_at_its_timeout_holding_250_tasks_is_retried_as_its_event_age_allows_then_polls_finish(
    event_age: str,
    make_settings: Callable[..., Settings],
    target: TargetServer,
    lambda_executors: Callable[..., LambdaExecutors],
) -> None:
    started = time.monotonic()
    # Given the executor's limits from the template (Timeout, 2 retries, MaximumEventAgeInSeconds), or with the
    # least age that leaves room for both retries of a timed-out invocation, all scaled alike so that the Timeout
    # is 20 s; warm; executor leases of 5 s renewed every second, and polls reaching as far ahead as a scaled lead
    template = read_function_limits(EXECUTOR_FUNCTION)
    limits = template
    if event_age != "template":
        both = 2 * template.timeout_s + retry_delay_s(1) + retry_delay_s(2)
        if template.max_event_age_s >= both:
            pytest.skip(
                f"the template's MaximumEventAgeInSeconds ({template.max_event_age_s:g} s) already leaves room "
                f"for both retries ({both:g} s): its own scenario shows them"
            )
        limits = replace(template, max_event_age_s=both)
    scale = scale_to(limits, TIMEOUT_S)
    allowed = retries_after_timeouts(limits)
    settings = make_settings(
        **SHORT_LEASE,
        max_batch_size=250,
        db_threads=8,
        arm_margin_ms=1_000,
        # the poll cycle on the same scale: the lead keeps its interval plus the fast path's margin
        poll_interval_ms=max(1_000, round(60_000 * scale)),
        fast_path_margin_ms=round(10_000 * scale),
        lead_ms=max(5_000, round(90_000 * scale)),
    )
    run = lambda_executors(settings, limits, prewarm=1, time_scale=scale, scale_timeout=True)
    assert run.invoker.timeout_s == pytest.approx(TIMEOUT_S)
    print(
        f"\n{limits.describe()}; every Lambda time x {scale:.4f}: timeout {TIMEOUT_S} s, retries after "
        f"{60 * scale:g} s and {120 * scale:g} s, event age {limits.max_event_age_s * scale:g} s: "
        f"{allowed} retries of a timed-out invocation"
    )
    run.warm(1)
    store = store_for(settings)
    # ... and 250 tasks due one every 320 ms from 21 s ahead: when the invocation that arms them is killed at
    # its timeout, it holds all 250, due over the next 80 s
    t0 = now_ms()
    dues = [t0 + 21_000 + 320 * i for i in range(250)]
    tasks = http_tasks("timeout", dues, target.url, grace_ms=120_000)
    put_all(settings, tasks, now_ms())
    ids = [t.task_id for t in tasks]

    # When one invocation gets them all, and Lambda kills it at its timeout: it retries it a minute (scaled) later
    # if the event is no older than its age by then, and each retry is killed at its own timeout (the batch spans
    # four); once the event is done with, the scenario's polls (every second) find what the last attempt held
    # when its lease ended, at its deadline
    found = RecordingInvoker()
    poller_on(store, found, settings.model_copy(update={"lead_ms": 120_000})).poll(now_ms())
    run.invoker.invoke_async(one_batch(found).model_dump(mode="json"))
    assert wait_until(lambda: run.invoker.stats["timeouts"] >= 1, timeout=90), run.log_tail()
    assert run.invoker.wait_idle(60 + allowed * (TIMEOUT_S + 60)), f"{run.invoker.stats}\n{run.log_tail()}"
    retries = run.invoker.stats
    polls = finish_with_polls(store, poller_on(store, run.invoker, settings), ids, timeout=180)
    assert run.invoker.wait_idle(90), run.log_tail()
    stats = run.invoker.stats

    # Then each attempt was killed at its timeout and retried only while the event's age allowed it (counted from
    # its first enqueue, through its runs): with no room, the retry was dropped as too old
    assert retries["timeouts"] == retries["retries"] + 1, retries
    if allowed == 0:
        assert (retries["retries"], retries["expired"]) == (0, 1), retries
    else:  # a retry at the very edge of the age may come a little too late here, as it may in Lambda
        assert 1 <= retries["retries"] <= allowed, retries
    # ... each killed attempt was taken over by its retry (which runs under the same request id: it fences the
    # attempt if its heartbeat still runs; its lease never reaches past the invocation's deadline) or, after the
    # last, by a poll, and only tasks due in its crash window - from its last heartbeat to its deadline - may be
    # MISSED
    beats = heartbeats(settings)
    dead = {executor_id: item for executor_id, item in beats.items() if item.get("taken_over")}
    windows = crash_windows(settings, dict(zip(ids, dues, strict=True)), dead)
    # an invocation's attempts all run under its request id: each but the last was taken over by a retry
    retried = sum(n - 1 for n in Counter(text_of(item, "invocation") for item in dead.values()).values())
    fenced = sum(1 for item in dead.values() if item.get("fenced"))
    assert retried == retries["retries"], f"a retry did not take over its earlier attempt: {retries}"
    verdict = judge(
        "executor killed at its timeout holding 250 tasks; Lambda's retries within the event age, then polls",
        store,
        ids,
        target,
        windows=windows,
    )
    stored = store.client.get_many(ids)
    assert {t.status for t in stored.values()} <= {TaskStatus.SUCCEEDED, TaskStatus.MISSED}
    spans = ", ".join(f"{(end - start) / 1000:.1f} s" for start, end in sorted(windows))
    if event_age == "template":
        report_figures(
            "timeout",
            {
                "tasks": len(ids),
                "timeout_s": limits.timeout_s,
                "event_age_s": limits.max_event_age_s,
                "retries_allowed": allowed,
                "retries": retries["retries"],
                "killed_attempts": len(dead),
                "taken_over_by_a_retry": retried,
                "fenced_by_a_retry": fenced,
                "taken_over_by_a_poll": len(dead) - retried,
                "window_s": [round((end - start) / 1000, 1) for start, end in sorted(windows)],
                "due_in_windows": len(verdict.due_in_window),
                "missed_in_windows": len(verdict.missed_in_window),
                "missed_outside_windows": len(verdict.missed_outside_window),
                "lost": len(verdict.lost),
                "unexplained_extra": len(verdict.unexplained),
            },
        )
    print(f"invoker: {stats}; polls {polls}; heartbeats {len(beats)}")
    print(
        f"event age {limits.max_event_age_s:g} s: {retries['retries']} of {allowed} retries made, "
        f"{retries['expired']} dropped as too old; killed attempts: {len(dead)} ({retried} taken over by a retry of "
        f"their invocation, {fenced} of them fenced by it; {len(dead) - retried} by a poll); crash windows {spans}; "
        f"due in them {len(verdict.due_in_window)}, MISSED {len(verdict.missed_in_window)} of 250; "
        f"run {time.monotonic() - started:.1f} s"
    )


@pytest.mark.timeout(60)
def test_lambdas_retry_of_an_invocation_keeps_its_request_id(tmp_path: Path) -> None:
    # Given a function with a 1 s timeout and one retry, whose handler notes its request id and never returns
    handler = tmp_path / "handler.py"
    ids = tmp_path / "ids"
    handler.write_text(
        "import time\n"
        "def handler(event, context):\n"
        f"    with open({str(ids)!r}, 'a') as handle:\n"
        "        handle.write(context.aws_request_id + '\\n')\n"
        "    time.sleep(3600)\n"
    )
    invoker = LocalInvoker(
        handler,
        {},
        log_file=tmp_path / "worker.log",
        limits=FunctionLimits("retried", timeout_s=1, max_retry_attempts=1),
        prewarm=0,
        time_scale=0.01,
    )
    try:
        # When one event is invoked (killed at its timeout, retried, killed again)
        invoker.invoke_async({"name": "hang"})
        assert invoker.wait_idle(40)
        seen = ids.read_text().split()
        # Then both attempts ran under the same request id, as in Lambda
        assert len(seen) == 2
        assert seen[0] == seen[1], seen
    finally:
        invoker.shutdown(timeout=10)


# -- 2. concurrency 2 and a burst of 2,000 tasks -----------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_burst_of_2000_tasks_with_executor_concurrency_2_is_throttled_queued_and_fired_once(
    make_settings: Callable[..., Settings],
    target: TargetServer,
    lambda_executors: Callable[..., LambdaExecutors],
) -> None:
    started = time.monotonic()
    # Given an executor function that may run twice at once (2 warm workers)
    settings = make_settings()
    run = lambda_executors(settings, executor_limits(timeout_s=120, reserved_concurrency=2), prewarm=2)
    assert run.invoker.concurrency == 2
    run.warm(2)
    store = store_for(settings)
    # ... and 2,000 tasks due at one instant, 30 s after they are stored (time to arm), a grace of 3 minutes
    due = now_ms() + 35_000
    tasks = http_tasks("burst", [due] * 2_000, target.url, grace_ms=180_000)
    put_all(settings, tasks, now_ms())
    ids = [t.task_id for t in tasks]

    # When one poll dispatches them, batch after batch
    poller = poller_on(store, run.invoker, settings)
    report = poller.poll(now_ms())
    print(f"\npoll: {report}")
    assert wait_until(lambda: all_final(store, ids), timeout=180, interval=1), (
        f"{Counter(t.status.value for t in store.client.get_many(ids).values())}\n{run.invoker.stats}\n{run.log_tail()}"
    )
    assert run.invoker.wait_idle(60)

    # Then the invocations past the concurrency were throttled, queued and run later: none was dropped
    stats = run.invoker.stats
    print(f"invoker: {stats}")
    assert stats["throttles"] >= 1, stats
    assert stats["dropped"] == 0, stats
    assert stats["completed"] == len(run.reports)
    # ... every task fired once (late where its batch waited for a free executor: printed, not asserted)
    stored = store.client.get_many(ids)
    assert {t.status for t in stored.values()} == {TaskStatus.SUCCEEDED}
    verdict = judge("burst of 2,000 with executor concurrency 2", store, ids, target)
    assert len(verdict.matched) == len(ids)
    latest = max((drift for _, drift in verdict.late), default=0.0)
    print(
        f"window: none (no crash); MISSED {len(verdict.explicitly_missed)}; {len(verdict.late)} late, the "
        f"latest {latest:.0f} ms after the instant; {len(run.reports)} invocations; "
        f"run {time.monotonic() - started:.1f} s"
    )


# -- 3. a worker frozen past its lease, then thawed ----------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_worker_frozen_past_its_lease_and_thawed_is_not_revived_and_fires_nothing_taken_from_it(
    make_settings: Callable[..., Settings],
    target: TargetServer,
    lambda_executors: Callable[..., LambdaExecutors],
) -> None:
    started = time.monotonic()
    # Given executors with 5 s leases renewed every second (2 warm workers, a long timeout)
    settings = make_settings(**SHORT_LEASE, arm_margin_ms=1_000)
    run = lambda_executors(settings, executor_limits(timeout_s=120), prewarm=2)
    run.warm(2)
    store = store_for(settings)
    # ... and 20 tasks due from 60 s to 66 s ahead (a busy machine may take half a minute to arm, freeze and take over)
    t0 = now_ms()
    dues = [t0 + 60_000 + 300 * i for i in range(20)]
    tasks = http_tasks("frozen", dues, target.url, grace_ms=120_000)
    create_all(store, tasks)
    ids = [t.task_id for t in tasks]
    poller = poller_on(store, run.invoker, settings)
    found = RecordingInvoker()  # what one poll sends, as one batch (the tasks may span two reads of the index)
    poller_on(store, found, settings).poll(now_ms())
    run.invoker.invoke_async(one_batch(found).model_dump(mode="json"))
    assert wait_until(lambda: {t.status for t in store.client.get_many(ids).values()} == {TaskStatus.ARMED}, timeout=30)
    owner = store.client.get_many(ids)[ids[0]].armed_by
    assert owner is not None
    (pid,) = run.invoker.busy_worker_pids()

    # When its worker is stopped (SIGSTOP) while it holds the batch, until its lease has lapsed
    os.kill(pid, signal.SIGSTOP)
    frozen_at = now_ms()
    assert wait_until(lambda: (alive_until(settings, owner) or 0) < now_ms(), timeout=30)
    last_alive = alive_until(settings, owner)
    assert last_alive is not None
    # ... a poll finds its tasks held by a dead executor, and another executor takes them over
    poller.poll(now_ms())
    assert wait_until(lambda: dead_for_good(settings, owner), timeout=30), run.log_tail()
    assert wait_until(lambda: all(takeover_marks(settings, i)[0] == owner for i in ids), timeout=30)
    # ... and then, 10 s after it stopped, the frozen worker runs again (SIGCONT), before any of its tasks is due
    time.sleep(max(0.0, (frozen_at + 10_000 - now_ms()) / 1000))
    os.kill(pid, signal.SIGCONT)
    thawed_at = now_ms()
    assert thawed_at < dues[0], "the takeover came after the first due instant: the timing went wrong"

    # Then its stale renewal does not revive it: its heartbeat stays where the takeover found it
    assert wait_until(lambda: run.report_of(owner) is not None, timeout=60), run.log_tail()
    assert alive_until(settings, owner) == last_alive
    assert dead_for_good(settings, owner)
    # ... it fired nothing: every task it held was taken over, none due in its crash window
    report = run.report_of(owner)
    assert report is not None
    assert report["fired"] == 0, report
    assert report["missed"] == 0, report
    assert wait_until(lambda: all_final(store, ids), timeout=60)
    stored = store.client.get_many(ids)
    assert {t.status for t in stored.values()} == {TaskStatus.SUCCEEDED}
    assert all(d > last_alive for d in dues)
    print(
        f"\nfrozen {thawed_at - frozen_at} ms (lease lapsed at +{last_alive - t0} ms, thawed at +{thawed_at - t0} "
        f"ms); its report: fired {report['fired']}, fenced {report.get('fenced')}, released "
        f"{report.get('released')}"
    )
    # ... and the checker sees no extra fire: nothing the takeover took was fired by the thawed worker too
    verdict = judge(
        "worker frozen 10 s, past its lease, thawed after a takeover",
        store,
        ids,
        target,
        windows=crash_windows(settings, dict(zip(ids, dues, strict=True)), [owner]),
    )
    print(
        f"window <= +{last_alive - t0} ms (no task due in it), MISSED {len(verdict.explicitly_missed)}, "
        f"run {time.monotonic() - started:.1f} s"
    )


# -- 4. a record write throttled three times ---------------------------------------------------------------------
class ThrottlesRecords(Executors):
    """The executor's real writes, but its first ``failures`` ``record_many`` calls raise a throttling ClientError."""

    failures = 3
    failed = 0
    _lock = threading.Lock()

    def record_many(self, executor_id: str, records: list[FireRecord]) -> list[bool]:
        with self._lock:
            throttle = self.failed < self.failures
            if throttle:
                self.failed += 1
        if throttle:
            raise ClientError(
                {
                    "Error": {
                        "Code": "ProvisionedThroughputExceededException",
                        "Message": "injected by the fault suite: the request rate is too high",
                    }
                },
                "TransactWriteItems",
            )
        return super().record_many(executor_id, records)


@pytest.mark.timeout(90)
def test_a_record_write_throttled_three_times_is_recorded_after_its_retries_not_missed(
    settings: Settings,
    target: TargetServer,
    make_executor: Callable[..., Executor],
) -> None:
    started = time.monotonic()
    # Given 10 tasks due in ~3 s, dispatched in one batch, and an executor whose first three record writes are
    # throttled
    t0 = now_ms()
    tasks = http_tasks("record-throttled", [t0 + 3_000 + 50 * i for i in range(10)], target.url)
    create_all(store_for(settings), tasks)
    invoker = RecordingInvoker()
    poller_on(store_for(settings), invoker, settings).poll(now_ms())
    store = store_for(settings, ThrottlesRecords)

    # When it runs the batch
    report = make_executor(store, settings).run_batch(one_batch(invoker))

    # Then the record write failed three times, and the outcomes were recorded after its retries
    assert store.firing.failed == 3  # type: ignore[attr-defined]
    assert (report.armed, report.fired, report.not_recorded) == (10, 10, 0), report
    ids = [t.task_id for t in tasks]
    assert {t.status for t in store_for(settings).client.get_many(ids).values()} == {TaskStatus.SUCCEEDED}
    verdict = judge("record write throttled three times", store_for(settings), ids, target)
    assert not verdict.explicitly_missed
    print(f"window: none, MISSED {len(verdict.explicitly_missed)}, run {time.monotonic() - started:.1f} s")


# -- 5. unprocessed keys on every BatchGetItem of a poll -----------------------------------------------------------
class UnprocessedReads:
    """A DynamoDB client whose BatchGetItem answers every key unprocessed (throttled) while ``failing``; every
    other call goes to the real client."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.failing = True
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def batch_get_item(self, **kwargs: Any) -> dict[str, Any]:
        if self.failing:
            self.refused += 1
            request = kwargs["RequestItems"]
            return {"Responses": {table: [] for table in request}, "UnprocessedKeys": request}
        answer: dict[str, Any] = self._client.batch_get_item(**kwargs)
        return answer


@pytest.mark.timeout(90)
def test_a_poll_whose_batch_gets_stay_unprocessed_does_not_fail_and_the_next_poll_sends_the_tasks(
    settings: Settings,
    target: TargetServer,
    make_executor: Callable[..., Executor],
) -> None:
    started = time.monotonic()
    # Given 12 tasks due in ~4 s, and a poller whose every BatchGetItem leaves all its keys unprocessed
    t0 = now_ms()
    tasks = http_tasks("unprocessed", [t0 + 4_000 + 50 * i for i in range(12)], target.url)
    create_all(store_for(settings), tasks)
    ids = [t.task_id for t in tasks]
    client = UnprocessedReads(make_client(settings.endpoint_url))
    store = DynamoStores.from_settings(client, settings)  # type: ignore[arg-type]  # a stand-in that answers only the calls this test makes
    sleeps: list[float] = []
    store.table.sleep = sleeps.append  # the backoff between attempts, noted instead of slept
    invoker = InlineInvoker(lambda: make_executor(store_for(settings), settings))
    poller = poller_on(store, invoker, settings)

    # When it polls
    first = poller.poll(now_ms())

    # Then the poll does not fail: it retried the unprocessed keys with backoff, then sent nothing
    assert client.refused >= 2, (client.refused, sleeps)
    assert sleeps, (client.refused, sleeps)
    assert invoker.events == []
    assert {t.status for t in store_for(settings).client.get_many(ids).values()} == {TaskStatus.PENDING}

    # When the throttling has passed and the next poll runs  Then it sends every task, which fires once
    client.failing = False
    second = poller.poll(now_ms())
    assert sorted(invoker.task_ids) == sorted(ids)
    invoker.join()
    assert {t.status for t in store_for(settings).client.get_many(ids).values()} == {TaskStatus.SUCCEEDED}
    print(
        f"\nfirst poll: {first}\nsecond poll: {second}\nBatchGetItem refused {client.refused} times, "
        f"backoff {sum(sleeps):.2f} s over {len(sleeps)} waits"
    )
    verdict = judge("every BatchGetItem of a poll left unprocessed", store_for(settings), ids, target)
    print(f"window: none, MISSED {len(verdict.explicitly_missed)}, run {time.monotonic() - started:.1f} s")
