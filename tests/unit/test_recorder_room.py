"""punctual.executing.recorder.Recorder.room_in: how many records a gap between fires takes. On whole cores, all of them
once the gap is QUIET_S; under a CPU quota, only those whose writes, at ``cpu / share`` of wall time, end a quota period
before the next fire."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest

from punctual.domain.clock import SystemClock
from punctual.executing.dispatcher import Dispatcher
from punctual.executing.recorder import QUIET_S, QUOTA_PERIOD_S, RECORD_CPU_S, Recorder
from punctual.stores.ports import FiringPort


@pytest.fixture
def dispatcher() -> Iterator[Dispatcher[Any]]:
    running: Dispatcher[Any] = Dispatcher(lambda _: None, workers=1, name="test-room")
    yield running
    running.close()


def recorder_for(dispatcher: Dispatcher[Any], cpu_share: float | None) -> Recorder:
    return Recorder(cast(FiringPort, object()), SystemClock(), dispatcher, cpu_share=cpu_share)


def test_on_whole_cores_a_quiet_gap_takes_every_record(dispatcher: Dispatcher[Any]) -> None:
    for share in (None, 1.0, 2.0):
        recorder = recorder_for(dispatcher, share)
        try:
            assert recorder.room_in(QUIET_S) == float("inf")
            assert recorder.room_in(QUIET_S - 0.001) == 0
        finally:
            recorder.close()


def test_under_a_quota_a_gap_takes_the_records_whose_writes_end_a_period_before_the_next_fire(
    dispatcher: Dispatcher[Any],
) -> None:
    # Given a recorder at 0.145 of a core that has seen a record's write cost 2 ms of CPU
    recorder = recorder_for(dispatcher, 0.145)
    try:
        recorder.record_cpu_s = RECORD_CPU_S
        # Then a gap of QUIET_S plus a quota period has no room; each 13.8 ms of wall time beyond takes one record
        assert recorder.room_in(QUIET_S + QUOTA_PERIOD_S) == 0
        assert int(recorder.room_in(QUIET_S + QUOTA_PERIOD_S + RECORD_CPU_S / 0.145 + 1e-9)) == 1
        assert int(recorder.room_in(QUIET_S + QUOTA_PERIOD_S + 1.0)) == int(0.145 / RECORD_CPU_S)
        # and a cheaper write (transactions) makes room for more
        recorder.record_cpu_s = RECORD_CPU_S / 4
        assert int(recorder.room_in(QUIET_S + QUOTA_PERIOD_S + 1.0)) == int(4 * 0.145 / RECORD_CPU_S)
    finally:
        recorder.close()
