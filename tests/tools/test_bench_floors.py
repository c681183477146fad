"""The drift benchmark's pure parts: the floors' shapes, the footing it states, the targets of each profile, and
the pictures drawn from the fires the table was computed from."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from punctual.domain.keys import shard_of
from punctual_tools.bench import bench
from punctual_tools.bench.cpu_use import CpuUse
from punctual_tools.bench.floors import FloorRunner, burst_shares, steady_offsets
from punctual_tools.bench.phase_parts import after_a_poll, drift_of, floor_result
from punctual_tools.stats import summarize


def test_a_steady_floor_is_due_at_whole_milliseconds() -> None:
    # Given a rate whose spacing is not a whole number of ms
    offsets = steady_offsets(30, 1)
    # Then every instant is a whole ms (as a task's due instant, and as the fire log keeps it)
    assert len(offsets) == 30
    assert all(isinstance(o, int) for o in offsets)
    assert offsets[:4] == [0, 33, 66, 100]


@pytest.mark.parametrize(
    ("count", "batch", "shares"),
    [
        (2000, 250, [250] * 8),
        (600, 250, [250, 250, 100]),
        (250, 250, [250]),
        (10, 250, [10]),
        (0, 250, []),
    ],
)
def test_a_burst_is_cut_as_the_poller_cuts_it(count: int, batch: int, shares: list[int]) -> None:
    assert burst_shares(count, batch) == shares


def test_one_shard_ids_all_fall_in_one_shard() -> None:
    ids = bench.one_shard_ids("one-abc-", 250, 4)
    assert len(set(ids)) == 250
    assert {shard_of(task_id, 4) for task_id in ids} == {0}
    assert all(task_id.startswith("one-abc-") for task_id in ids)


def fires(prefix: str, due: float, drifts: list[float]) -> list[dict[str, float | str]]:
    return [
        {"task_id": f"{prefix}{i}", "due_ms": due + 10 * i, "fired_ms": due + 10 * i + d} for i, d in enumerate(drifts)
    ]


def test_the_pictures_show_the_figures_of_the_table() -> None:
    # Given a floor, a phase with a duplicate fire, and a webhook burst (action starts and arrivals)
    steady = fires("floor-steady-", 1_000, [0.017, 0.02, 0.5])
    floors = {"floor/steady": floor_result(steady, CpuUse(), processes=1)}
    phase = fires("steady-", 2_000, [0.2, 0.3])
    phase.append({**phase[0], "fired_ms": 9_999.0})  # a later duplicate: not the task's drift
    starts, arrivals = fires("hook-", 3_000, [0.4, 0.6]), fires("hook-", 3_000, [3.0, 5.0])
    results = {
        "system/steady": {"fires": phase, "drift": drift_of(phase)[0]},
        "webhook/burst": {
            "fires": starts,
            "drift": drift_of(starts)[0],
            "arrival_fires": arrivals,
            "arrival": drift_of(arrivals)[0],
        },
    }
    # When the pictures' series are made
    series = {s.name: s for s in bench.phase_series(floors, results)}
    # Then each row of the table has a series with exactly its drifts (fractions of a ms kept)
    table = {
        "floor/steady": floors["floor/steady"]["drift"],
        "system/steady": results["system/steady"]["drift"],
        "webhook/burst": results["webhook/burst"]["drift"],
        "webhook/burst arrival": results["webhook/burst"]["arrival"],
    }
    assert set(series) == set(table)
    for name, drifts in table.items():
        assert sorted(series[name].drifts) == pytest.approx(sorted(drifts))
        assert summarize(series[name].drifts)["p50"] == summarize(drifts)["p50"]
    assert summarize(series["floor/steady"].drifts)["p50"] == pytest.approx(0.02)
    assert series["system/steady"].duplicates == 1


def test_both_profiles_judge_the_steady_tail_and_a_burst_at_one_and_a_half_times_their_floor() -> None:
    p99: dict[str, float | None] = {
        "floor/steady": 1.0,
        "system/steady": 1.4,
        "floor/burst": 20.0,
        "system/burst": 31.0,
    }
    lam = {v.name: v for v in bench.verdicts(p99, "lambda")}
    local = {v.name: v for v in bench.verdicts(p99, "local")}
    assert lam["system/steady"].ratio_target == 1.5
    assert lam["system/steady"].met
    assert lam["system/steady"].abs_target == 2.0
    assert not lam["system/burst"].met  # 1.55x
    assert local["system/steady"].ratio_target == 1.5
    assert local["system/steady"].ratio_met
    assert local["system/burst"].ratio_target == 1.5
    assert not local["system/burst"].ratio_met


def test_the_profile_is_said_first() -> None:
    assert "more than Lambda gives" in bench.profile_line("local", 256, None)
    assert "whole cores and firing at normal priority" in bench.profile_line("local", 256, None)
    assert "real-time firing where allowed" in bench.profile_line("local", 256, None, realtime=True)
    line = bench.profile_line("lambda", 256, True)
    assert "256 MB" in line
    assert "0.145 of a core" in line
    assert "normal priority" in line
    assert "NO CPU quota" in bench.profile_line("lambda", 256, False)


def test_floors_under_the_local_profile_stand_on_whole_cores() -> None:
    runner = FloorRunner("local", 256)
    try:
        assert not runner.footing.quota
        assert "whole cores" in runner.footing.line()
        assert runner.footing.as_dict()["profile"] == "local"
    finally:
        runner.close()


def test_an_unknown_profile_is_refused() -> None:
    with pytest.raises(ValueError, match="no profile"):
        FloorRunner("fast", 256)


def test_a_burst_is_written_once_the_next_poll_has_ended() -> None:
    # Given a stack whose poller reports a poll 0.2 s from now
    stack: Any = SimpleNamespace(polls=[object()], settings=SimpleNamespace(poll_interval_ms=1_000))
    threading.Timer(0.2, lambda: stack.polls.append(object())).start()
    # When the burst waits for it
    started = time.monotonic()
    after_a_poll(stack)
    # Then it returns once that poll is in, not before
    assert len(stack.polls) == 2
    assert 0.15 < time.monotonic() - started < 2.0


@pytest.mark.parametrize(
    ("writes_per_s", "rate"),
    [(62.7, 15.0), (400.0, 100.0), (3.0, 1.0), (0.0, 1.0)],
)
def test_the_steady_rate_is_half_what_the_store_carries_at_most_a_hundred(writes_per_s: float, rate: float) -> None:
    # Given the store's writes a second from a probe  Then the steady phases run at half of them, two writes a
    # task, a whole number of tasks a second, at least one and at most 100
    assert bench.carried_rate(writes_per_s, 2) == rate


def test_the_steady_phases_ask_the_store_for_their_rate_and_a_burst_for_none() -> None:
    # Given the benchmark's arguments with the steady rate it settled on
    args = SimpleNamespace(
        steady_rate=15.0,
        webhook_rate=20.0,
        recurring_schedules=20,
        fast_rate=10.0,
        lead_rate=5.0,
        lead_background_rate=1.0,
    )
    loads = bench.phase_loads(args)  # type: ignore[arg-type]
    # Then the phases scheduled ahead make two writes a task, those written during the run three
    assert loads["system/steady"] == (2, 15.0)
    assert loads["steady+writes"] == (3, 15.0)
    assert loads["system/burst"] == (2, None)
    assert loads["short lead"] == (3, 6.0)
