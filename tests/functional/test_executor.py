"""The executor service on moto, on the real clock: arm, fire at the due instant, record.

Tasks are due 0.3-1 s ahead so that arming happens before the due time, as in production. No assertion on
how late a fire is (that is a benchmark's figure); only that outcomes, counts and records are right.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from email.message import Message
from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.domain.clock import ClockOffset, SystemClock
from punctual.domain.events import BatchEvent, BatchTask
from punctual.domain.keys import shard_of
from punctual.domain.model import Task, TaskStatus
from punctual.executing import executor as executor_module
from punctual.executing.executor import Executor
from punctual.runtime.ntp import OffsetProbe
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.ports import FiringPort
from punctual.targets import HttpAction
from support import StubTarget, arm, dispatch_batch, due_candidates, read_task, serving, wait_until


class FixedOffset:
    """An offset probe that has already measured ``offset_ms``."""

    def __init__(self, offset_ms: float | None) -> None:
        self._offset = ClockOffset(offset_ms, "stub" if offset_ms is not None else None)

    def current(self) -> ClockOffset:
        return self._offset


class Target(StubTarget):
    """A local HTTP target: ``/ok`` answers 200, ``/fail`` answers 500; every request is kept."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []

    def answer(self, path: str, headers: Message, body: bytes) -> int:
        with self.lock:
            self.requests.append({"path": path, "headers": dict(headers), "body": body})
        return 200 if path == "/ok" else 500


@pytest.fixture
def target() -> Iterator[Target]:
    with serving(Target()) as server:
        yield server


@pytest.fixture
def clock() -> SystemClock:
    return SystemClock()


def test_close_ends_every_thread_the_executor_started(
    store: DynamoStores, tasks: Any, settings: Settings, clock: SystemClock, target: Target
) -> None:
    # Given an executor that has run a batch with a webhook (its event loop and connection pool in use)
    offset = OffsetProbe(None, 0.5)
    before = set(threading.enumerate())
    executor = Executor(store.firing, settings, clock, offset)
    now = int(clock.wall_ms())
    tasks.create(now + 300, now_ms=now, action=HttpAction(url=target.url("/ok")))
    assert executor.run_batch(dispatch_batch(store, settings, now)).succeeded == 1
    own = ("heartbeat", "recorder", "record-bg", "fire-loop", "dispatch")  # the store's pool belongs to the store
    started = {t for t in threading.enumerate() if t not in before and t.name.startswith(own)}
    assert {"heartbeat", "recorder", "fire-loop", "dispatch"} <= {t.name for t in started}
    # When it is closed
    executor.close()
    # Then every thread it started has ended
    assert [t.name for t in started if t.is_alive()] == []


def test_a_batch_fires_every_task_and_records_it(
    executor: Executor, store: DynamoStores, tasks: Any, settings: Settings, clock: SystemClock
) -> None:
    # Given five log tasks due 0.3-0.7 s from now, dispatched by the poller
    now = int(clock.wall_ms())
    created = [tasks.create(now + 300 + 100 * i, now_ms=now) for i in range(5)]
    event = dispatch_batch(store, settings, now)
    # When the executor runs the batch
    report = executor.run_batch(event)
    # Then every task was armed, fired and recorded SUCCEEDED, with its drift and fire time
    assert (report.tasks, report.armed, report.lost_arm) == (5, 5, 0)
    assert (report.fired, report.succeeded, report.failed, report.missed, report.not_recorded) == (5, 5, 0, 0, 0)
    assert len(report.drift_ms) == 5
    assert report.clock_offset_ms is None
    for task in created:
        done = read_task(store, task.task_id)
        assert done.status is TaskStatus.SUCCEEDED
        assert done.fired_at is not None
        assert done.finished_at is not None
        assert done.drift_ms is not None
        # fired_at - due_at is the drift (fired_at is kept to the ms, the drift to the µs)
        assert abs((done.fired_at - done.due_at).total_seconds() * 1000 - done.drift_ms) < 1.0
        # Never early: the wall clock may be slewed a little during the test, nothing more
        assert done.drift_ms > -5
        assert done.drift_ms <= done.misfire_grace_ms
        assert done.drift_corrected_ms is None
        assert done.armed_by == report.executor_id
        assert done.finished_at >= done.fired_at


def test_outcomes_are_written_by_the_background_writer_once_no_fire_is_near(
    executor: Executor,
    store: DynamoStores,
    tasks: Any,
    settings: Settings,
    clock: SystemClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given three tasks due together 0.3 s from now, and a record_many that notes which thread calls it
    now = int(clock.wall_ms())
    for _ in range(3):
        tasks.create(now + 300, now_ms=now)
    event = dispatch_batch(store, settings, now)
    callers: list[str] = []
    record_many = store.firing.record_many

    def spy(executor_id: str, records: list[Any]) -> list[bool]:
        callers.append(threading.current_thread().name)
        return record_many(executor_id, records)

    monkeypatch.setattr(store.firing, "record_many", spy)
    # When the executor runs the batch (nothing of it is left to fire once they have fired)
    report = executor.run_batch(event)
    # Then the outcomes were written by the lowered background writer, not by the recorder itself
    assert report.succeeded == 3
    assert callers
    assert all(name.startswith("record-bg") for name in callers)


def test_under_a_cpu_quota_every_task_fires_on_its_instant_and_every_outcome_is_recorded(
    store: DynamoStores, tasks: Any, settings: Settings, clock: SystemClock
) -> None:
    # Given an executor built for 0.145 of a core (it sleeps where it would spin, records only where a gap has room)
    executor = Executor(store.firing, settings, clock, FixedOffset(None), cpu_share=0.145)
    now = int(clock.wall_ms())
    created = [tasks.create(now + 300 + 150 * (i // 3), now_ms=now) for i in range(9)]
    event = dispatch_batch(store, settings, now)
    # When it runs a batch of lone and simultaneous fires
    report = executor.run_batch(event)
    # Then each fired once, never early, and each outcome was written
    assert (report.armed, report.succeeded, report.not_recorded) == (9, 9, 0)
    for task in created:
        done = read_task(store, task.task_id)
        assert done.status is TaskStatus.SUCCEEDED
        assert done.drift_ms is not None
        assert done.drift_ms > -5


def test_drift_is_also_recorded_corrected_by_the_clock_offset(
    store: DynamoStores, tasks: Any, settings: Settings, clock: SystemClock
) -> None:
    # Given an executor whose NTP probe measured that this machine is 2.5 ms behind
    executor = Executor(store.firing, settings, clock, FixedOffset(2.5))
    now = int(clock.wall_ms())
    task = tasks.create(now + 300, now_ms=now)
    # When the task fires
    report = executor.run_batch(dispatch_batch(store, settings, now))
    # Then the corrected drift is the raw drift plus the offset
    assert report.clock_offset_ms == 2.5
    done = read_task(store, task.task_id)
    assert done.drift_ms is not None
    assert done.drift_corrected_ms is not None
    assert done.drift_corrected_ms == pytest.approx(done.drift_ms + 2.5, abs=0.002)


def test_duplicate_delivery_fires_nothing(
    executor: Executor, store: DynamoStores, tasks: Any, settings: Settings, clock: SystemClock
) -> None:
    # Given a batch of three tasks, delivered and run once
    now = int(clock.wall_ms())
    for i in range(3):
        tasks.create(now + 300 + 50 * i, now_ms=now)
    event = dispatch_batch(store, settings, now)
    first = executor.run_batch(event)
    assert first.fired == 3
    # When Lambda delivers the same event again
    second = executor.run_batch(event)
    # Then the second run loses every arm and fires nothing
    assert second.lost_arm == 3
    assert (second.armed, second.fired, second.missed) == (0, 0, 0)
    assert second.executor_id != first.executor_id
    # (Two deliveries running at the same time are a race: moto does not make a conditional write atomic
    # across threads, so that case belongs to the integration tier, on DynamoDB Local.)


def test_a_task_cancelled_after_its_dispatch_is_not_fired(
    executor: Executor, store: DynamoStores, tasks: Any, settings: Settings, clock: SystemClock
) -> None:
    # Given two dispatched tasks, one of which the client then cancels
    now = int(clock.wall_ms())
    kept = tasks.create(now + 300, now_ms=now)
    cancelled = tasks.create(now + 350, now_ms=now)
    event = dispatch_batch(store, settings, now)
    store.client.cancel(cancelled.task_id, now + 1)
    # When the executor runs the batch
    report = executor.run_batch(event)
    # Then the cancelled task loses at arm and never fires; the other fires
    assert (report.armed, report.lost_arm, report.fired) == (1, 1, 1)
    gone = read_task(store, cancelled.task_id)
    assert gone.status is TaskStatus.CANCELLED
    assert gone.fired_at is None
    assert read_task(store, kept.task_id).status is TaskStatus.SUCCEEDED


def test_http_500_is_recorded_failed_with_detail(
    executor: Executor,
    store: DynamoStores,
    tasks: Any,
    settings: Settings,
    clock: SystemClock,
    target: Target,
) -> None:
    # Given an HTTP task whose target answers 500
    now = int(clock.wall_ms())
    task = tasks.create(now + 300, now_ms=now, action=HttpAction(url=target.url("/fail"), timeout_s=5))
    # When it fires
    report = executor.run_batch(dispatch_batch(store, settings, now))
    # Then it is FAILED, and the detail says why
    assert (report.fired, report.failed, report.succeeded) == (1, 1, 0)
    done = read_task(store, task.task_id)
    assert done.status is TaskStatus.FAILED
    assert done.detail is not None
    assert "HTTP 500" in done.detail
    assert done.fired_at is not None
    # And a 500 being transient, it was tried three times within the grace, each with the task's key
    assert [r["headers"]["Idempotency-Key"] for r in target.requests] == [f"{task.task_id}:0"] * 3


def test_http_200_receives_the_idempotency_key(
    executor: Executor,
    store: DynamoStores,
    tasks: Any,
    settings: Settings,
    clock: SystemClock,
    target: Target,
) -> None:
    # Given an HTTP task with a JSON payload and a custom header
    now = int(clock.wall_ms())
    task = tasks.create(
        now + 300,
        "publish-v-123",
        now_ms=now,
        payload={"video": "v-123", "n": [1, 2]},
        action=HttpAction(url=target.url("/ok"), headers={"X-Tenant": "t1"}, timeout_s=5),
    )
    # When it fires
    report = executor.run_batch(dispatch_batch(store, settings, now))
    # Then the target got one POST with the payload, the idempotency key and the task's headers
    assert report.succeeded == 1
    assert read_task(store, task.task_id).status is TaskStatus.SUCCEEDED
    assert len(target.requests) == 1
    request = target.requests[0]
    assert request["path"] == "/ok"
    assert request["headers"]["Idempotency-Key"] == "publish-v-123:0"
    assert request["headers"]["X-Punctual-Task-Id"] == "publish-v-123"
    assert request["headers"]["X-Punctual-Due-Ms"] == str(task.due_ms)
    assert request["headers"]["X-Tenant"] == "t1"
    assert request["headers"]["Content-Type"] == "application/json"
    assert json.loads(request["body"]) == {"video": "v-123", "n": [1, 2]}


def test_the_batchs_targets_are_prepared_once_it_is_armed(
    executor: Executor,
    store: DynamoStores,
    tasks: Any,
    settings: Settings,
    clock: SystemClock,
    target: Target,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given three webhook tasks due 0.4-0.6 s from now
    prepared: list[tuple[Any, float]] = []
    real = executor_module.prepare_actions  # type: ignore[attr-defined]  # patched where the executor looks it up

    def recording(fires: Any, env: Any) -> Any:
        prepared.extend(fires)
        return real(fires, env)

    monkeypatch.setattr(executor_module, "prepare_actions", recording)
    now = int(clock.wall_ms())
    action = HttpAction(url=target.url("/ok"), timeout_s=5)
    for i in range(3):
        tasks.create(now + 400 + 100 * i, f"warm-{i}", now_ms=now, action=action)
    # When the executor runs their batch
    report = executor.run_batch(dispatch_batch(store, settings, now))
    # Then its actions were handed to be prepared (connections warmed) with the time left until each is due,
    # and every task fired as usual
    assert report.succeeded == 3
    assert [p[0] for p in prepared] == [action] * 3
    delays = sorted(p[1] for p in prepared)
    assert [round(b - a, 6) for a, b in zip(delays, delays[1:], strict=False)] == [0.1, 0.1]
    assert len(target.requests) == 3


def test_task_past_its_grace_at_fire_time_is_missed(
    executor: Executor, store: DynamoStores, tasks: Any, clock: SystemClock
) -> None:
    # Given a task with no grace, due 5 s ago, written on time by a client and dispatched (its executor came late)
    now = int(clock.wall_ms())
    due = now - 5_000
    task = tasks.create(due, now_ms=due - 1_000, misfire_grace_ms=0)
    assert any(c.task_id == task.task_id for c in due_candidates(store, due, _shard(store, task), now))
    event = BatchEvent(batch_id="late-batch", tasks=[BatchTask(task_id=task.task_id, due_ms=due, grace_ms=0)])
    # When the executor runs it
    report = executor.run_batch(event)
    # Then it is not fired but recorded MISSED, with the reason
    assert (report.armed, report.fired, report.missed) == (1, 0, 1)
    done = read_task(store, task.task_id)
    assert done.status is TaskStatus.MISSED
    assert done.fired_at is None
    assert done.detail is not None
    assert "past its grace of 0 ms" in done.detail


def _shard(store: DynamoStores, task: Task) -> int:
    return shard_of(task.task_id, store.config.shard_count)


def test_stop_releases_armed_tasks_that_have_not_fired(
    executor: Executor, store: DynamoStores, tasks: Any, settings: Settings, clock: SystemClock
) -> None:
    # Given a batch of tasks due in 60 s (far beyond what arming and stopping can take), armed and waiting in
    # the dispatcher
    now = int(clock.wall_ms())
    created = [tasks.create(now + 60_000 + i, now_ms=now) for i in range(3)]
    event = dispatch_batch(store, settings, now)
    reports = []
    runner = threading.Thread(target=lambda: reports.append(executor.run_batch(event)))
    runner.start()
    assert wait_until(lambda: all(read_task(store, t.task_id).status is TaskStatus.ARMED for t in created), 30, 0.02)
    # When the executor is asked to stop (SIGTERM in the local runtime)
    executor.request_stop()
    runner.join(timeout=30)
    # Then run_batch returns before the due time, fires nothing, and hands every task back as PENDING
    assert not runner.is_alive()
    (report,) = reports
    assert (report.armed, report.fired, report.released) == (3, 0, 3)
    assert int(clock.wall_ms()) < now + 60_000
    for task in created:
        back = read_task(store, task.task_id)
        assert back.status is TaskStatus.PENDING
        assert back.fired_at is None
        assert back.armed_by is None
    # And the next poll finds and dispatches them again
    assert dispatch_batch(store, settings, int(clock.wall_ms())).tasks[0].task_id == created[0].task_id


class JumpingClock(SystemClock):
    """The system clock whose monotonic time can be moved ahead: a process that was paused, or cut off."""

    def __init__(self) -> None:
        self.jump_s = 0.0

    def monotonic(self) -> float:
        return super().monotonic() + self.jump_s


class JumpAfterArm:
    """The real store, but once a batch is armed the executor's monotonic clock jumps past its own lease."""

    def __init__(self, store: FiringPort, clock: JumpingClock, jump_s: float) -> None:
        self._store, self._clock, self._jump_s = store, clock, jump_s

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def arm_many(self, *args: Any, **kwargs: Any) -> Any:
        armed = self._store.arm_many(*args, **kwargs)
        self._clock.jump_s += self._jump_s
        return armed


class FailsMidArm:
    """The real store, but the first ``arm_many`` arms only the first half of what it is asked, then raises (its
    requests' retries exhausted part-way: throttling, a network fault)."""

    def __init__(self, store: FiringPort) -> None:
        self._store = store
        self.calls: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def arm_many(self, requests: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(len(requests))
        if len(self.calls) == 1:
            self._store.arm_many(requests[: len(requests) // 2], *args, **kwargs)
            raise ConnectionError("the store went away part-way")
        return self._store.arm_many(requests, *args, **kwargs)


def test_an_executor_whose_arming_fails_part_way_arms_the_rest_again_and_fires_all(
    store: DynamoStores, tasks: Any, settings: Settings, clock: SystemClock
) -> None:
    # Given 6 tasks due in 0.5 s in one batch, and a store that fails the executor's first arm_many after arming
    # half of them
    now = int(clock.wall_ms())
    created = [tasks.create(now + 500 + i, now_ms=now) for i in range(6)]
    event = dispatch_batch(store, settings, now)
    failing = FailsMidArm(store.firing)
    executor = Executor(failing, settings, clock, FixedOffset(None))
    # When it runs the batch
    report = executor.run_batch(event)
    # Then it read back the half it armed, armed the other half again, and fired all six (a poll holds back what
    # a batch with progress has not armed: its executor must not leave it)
    assert failing.calls == [6, 3]
    assert (report.armed, report.fired, report.lost_arm) == (6, 6, 0)
    assert all(read_task(store, t.task_id).status is TaskStatus.SUCCEEDED for t in created)


def test_an_executor_past_its_own_lease_fires_nothing_and_hands_its_tasks_back(
    store: DynamoStores, tasks: Any, settings: Settings
) -> None:
    # Given an executor whose clock, once it has armed, is past the end of its lease (it could not renew it:
    # another executor may take its tasks over from now on)
    clock = JumpingClock()
    executor = Executor(
        JumpAfterArm(store.firing, clock, jump_s=settings.executor_lease_ms / 1000 + 1),
        settings,
        clock,
        OffsetProbe(None, 0.5),
    )
    now = int(clock.wall_ms())
    created = [tasks.create(now + 300 + i, now_ms=now) for i in range(2)]
    event = dispatch_batch(store, settings, now)
    # When it runs the batch
    report = executor.run_batch(event)
    # Then it armed both, fired neither, and released both (PENDING again, for the next dispatch)
    assert (report.armed, report.fired, report.fenced, report.released) == (2, 0, 2, 2)
    assert all(read_task(store, t.task_id).status is TaskStatus.PENDING for t in created)


def test_an_executor_takes_over_the_tasks_of_a_dead_one_and_misses_only_its_crash_window(
    executor: Executor, store: DynamoStores, tasks: Any, settings: Settings, clock: SystemClock
) -> None:
    # Given an executor that armed three tasks and died, its last lease having ended 1 s ago: one task was due
    # 2 s ago (it may have fired it before dying), two are due shortly after now
    now = int(clock.wall_ms())
    window = tasks.create(now - 2_000, now_ms=now - 60_000, misfire_grace_ms=120_000)
    later = [tasks.create(now + 400 + i, now_ms=now - 60_000) for i in range(2)]
    assert store.firing.heartbeat("x-dead", now - 60_000, now - 1_000)
    for task in (window, *later):
        assert arm(store, task, "x-dead", now - 60_000) is not None
    # When the next poll dispatches them and a live executor runs the batch
    event = dispatch_batch(store, settings, now)
    report = executor.run_batch(event)
    # Then it took all three over; the two due after the dead one's lease fired once; the one in its crash
    # window is recorded MISSED (never fired a second time), saying why
    assert (report.armed, report.taken_over, report.fired, report.missed) == (3, 3, 2, 1)
    assert all(read_task(store, t.task_id).status is TaskStatus.SUCCEEDED for t in later)
    missed = read_task(store, window.task_id)
    assert missed.status is TaskStatus.MISSED
    assert missed.fired_at is None
    assert missed.detail is not None
    assert "executor was lost" in missed.detail


HOLD_S = 300  # how long a later part waits for the first part's first record: only a hang reaches it (a busy
# machine's recorder, at a lower priority beside two busy cores and a test worker, took over 60 s in one run)


class HoldsLaterParts:
    """The real store, but arming any part after the first waits until ``release`` is set (a slow store, an
    executor at a small CPU quota arming with single writes): what the executor does with its first part
    meanwhile shows."""

    def __init__(self, store: FiringPort) -> None:
        self._store = store
        self.release = threading.Event()
        self.parts: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def arm_many(self, requests: Any, *args: Any, **kwargs: Any) -> Any:
        self.parts.append(len(requests))
        if len(self.parts) > 1:
            assert self.release.wait(HOLD_S), "the first part never fired"
        return self._store.arm_many(requests, *args, **kwargs)


def test_a_batch_due_soon_fires_its_first_part_while_the_rest_is_armed(
    store: DynamoStores, tasks: Any, settings: Settings, clock: SystemClock
) -> None:
    # Given 40 tasks due from 0.3 s on, dispatched in one batch, and a store whose arming of any part after the
    # first waits until the first task has been recorded
    now = int(clock.wall_ms())
    created = [tasks.create(now + 300 + 10 * i, now_ms=now) for i in range(40)]
    event = dispatch_batch(store, settings, now)
    holding = HoldsLaterParts(store.firing)
    executor = Executor(holding, settings, clock, FixedOffset(None))  # type: ignore[arg-type]
    first = created[0].task_id

    def release_once_the_first_is_recorded() -> None:
        if wait_until(lambda: read_task(store, first).status is TaskStatus.SUCCEEDED, HOLD_S, 0.02):
            holding.release.set()

    watcher = threading.Thread(target=release_once_the_first_is_recorded)
    watcher.start()
    try:
        # When the executor runs it
        report = executor.run_batch(event)
    finally:
        holding.release.set()
        watcher.join()
        executor.close()
    # Then it armed the soonest due first, in parts that double, and the first part fired and was recorded while
    # the later parts waited to be armed; every task fired once and was recorded
    assert holding.parts == [16, 24]
    assert (report.armed, report.fired, report.succeeded, report.not_recorded) == (40, 40, 40, 0)
    assert {read_task(store, t.task_id).status for t in created} == {TaskStatus.SUCCEEDED}
