"""Faults outside Punctual's code: a throttling store, an unreachable NTP server."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from functools import partial

import pytest
from fault_tools import Throttle, http_tasks, judge

from punctual.config.settings import Settings
from punctual.domain.clock import ClockOffset
from punctual.domain.events import PollReport
from punctual.domain.model import TaskStatus
from punctual.executing.executor import Executor
from punctual.runtime.ntp import OffsetProbe, measure_offset
from punctual.runtime.wiring import poller_on
from punctual.stores.dynamodb import DynamoStores
from punctual_tools.local.dynamodb_local import make_client
from punctual_tools.local.target import TargetServer
from support import RecordingInvoker, create_all, now_ms, one_batch, run_threads, store_for

pytestmark = pytest.mark.integration


# -- 9. store throttling --------------------------------------------------------------------------------------
@pytest.mark.timeout(150)
@pytest.mark.parametrize("write_batch", ["single", "transaction"])
def test_a_store_throttling_a_fifth_of_requests_loses_and_doubles_nothing(
    write_batch: str,
    make_settings: Callable[..., Settings],
    target: TargetServer,
    make_executor: Callable[..., Executor],
) -> None:
    # Given a store that answers ~20% of requests with ProvisionedThroughputExceededException (at most 2 in a
    # row per request: botocore's standard retry mode makes up to 8 attempts), on every client of the scenario
    settings = make_settings(write_batch=write_batch, max_batch_size=12, db_threads=8)
    throttle = Throttle(rate=0.2, max_in_a_row=2)

    def throttled() -> DynamoStores:
        return DynamoStores.from_settings(throttle.install(make_client(settings.endpoint_url)), settings)

    # When 24 tasks due in ~5 s (written by an unthrottled client) are polled by two pollers at once (each
    # dispatches every task) and run by their executors (heartbeats, arms, records), all on the throttling store
    due = now_ms() + 5_000
    tasks = http_tasks(f"throttle-{write_batch}", [due + 20 * i for i in range(24)], target.url)
    create_all(store_for(settings), tasks)
    invokers = [RecordingInvoker(), RecordingInvoker()]
    at = now_ms()

    def poll(invoker: RecordingInvoker) -> PollReport:
        return poller_on(throttled(), invoker, settings).poll(at)

    run_threads([partial(poll, inv) for inv in invokers])
    events = [e for inv in invokers for e in inv.events]
    executors = [make_executor(throttled(), settings) for _ in events]
    reports = run_threads([partial(x.run_batch, e) for x, e in zip(executors, events, strict=True)])
    print(f"\ninjected throttling errors by operation: {throttle.injected} ({throttle.sent} requests sent)")

    # Then throttling happened, and was retried through: every task armed (one of its two dispatches lost at
    # ARM), fired and recorded once
    assert sum(throttle.injected.values()) >= 5
    assert sum(n for op, n in throttle.injected.items() if op in Throttle.WRITES) >= 2
    assert sum(r.armed for r in reports) == len(tasks)
    assert sum(r.lost_arm for r in reports) == len(tasks)
    assert sum(r.not_recorded for r in reports) == 0
    ids = [t.task_id for t in tasks]
    assert {t.status for t in store_for(settings).client.get_many(ids).values()} == {TaskStatus.SUCCEEDED}
    judge(f"store throttling ~20% of requests ({write_batch})", store_for(settings), ids, target)


# -- 10. NTP unreachable --------------------------------------------------------------------------------------
@pytest.fixture
def silent_ntp() -> Iterator[str]:
    """A UDP socket on loopback that never answers: an NTP server that is unreachable (requests time out)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.timeout(60)
def test_with_ntp_unreachable_tasks_fire_on_time_and_drift_is_recorded_uncorrected(
    make_settings: Callable[..., Settings],
    silent_ntp: str,
    target: TargetServer,
    make_executor: Callable[..., Executor],
) -> None:
    # Given an executor whose cold-start NTP probe asks a server that never answers (4 s timeout)
    settings = make_settings(ntp_server=silent_ntp, ntp_timeout_s=4)
    probe = WatchedProbe(settings.ntp_server, settings.ntp_timeout_s)
    executor = make_executor(store_for(settings), settings, offset=probe)
    # ... and 20 tasks due in ~2.5 s, dispatched in one batch (the probe is still waiting when they fire)
    due = now_ms() + 2_500
    tasks = http_tasks("ntp", [due + 10 * i for i in range(20)], target.url)
    ids = [t.task_id for t in tasks]
    create_all(store_for(settings), tasks)
    invoker = RecordingInvoker()
    poller_on(store_for(settings), invoker, settings).poll(now_ms())
    event = one_batch(invoker)

    # When the batch runs
    report = executor.run_batch(event)

    # Then the fires did not wait for the probe (the executor only ever read what it had), which found no offset
    assert not probe.waited
    offset = OffsetProbe.wait(probe, 6)
    assert offset.offset_ms is None
    assert offset.error
    assert report.clock_offset_ms is None
    stored = store_for(settings).client.get_many(ids)
    assert {t.status for t in stored.values()} == {TaskStatus.SUCCEEDED}
    # ... drift is recorded raw, with no corrected figure
    assert all(t.drift_ms is not None and t.drift_corrected_ms is None for t in stored.values())
    # ... and the target saw every task fire once (how late is printed: on a busy machine the batch itself may
    # start late, whatever the probe does)
    verdict = judge("NTP unreachable", store_for(settings), ids, target)
    assert verdict.ok
    assert not verdict.lost
    assert not verdict.extra


class WatchedProbe(OffsetProbe):
    """The real probe, which notes whether anyone waited for its answer."""

    waited = False

    def wait(self, timeout: float | None = None) -> ClockOffset:
        self.waited = True
        return super().wait(timeout)


def test_an_ntp_server_on_a_closed_port_gives_no_offset_quickly() -> None:
    # Given a loopback port nobody listens on (bound, then closed)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    # When the offset is measured there
    offset = measure_offset(f"127.0.0.1:{port}", timeout_s=0.5)

    # Then it is unknown, with the reason
    assert offset.offset_ms is None
    assert not offset.corrected
    assert offset.error
