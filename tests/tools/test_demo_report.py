"""The demo's report, built by the checker from a synthetic fire log and a fake table.

``build_report`` takes every figure from the checker's verdict: fires matched to planned tasks, duplicates,
explicit outcomes (MISSED, FAILED) read from the table for tasks that did not fire, lost tasks, and fires late or
early beyond ε. The client is a fake that answers ``get`` from a dict (the table) and records what was read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.domain.keys import from_ms
from punctual.domain.model import Task, TaskStatus, split_occurrence_id
from punctual.targets import LogAction
from punctual_tools import demo
from punctual_tools.cli import main
from punctual_tools.demo import (
    DemoPlan,
    FireLogTail,
    build_report,
    check_fire_log,
    format_report,
    plan_demo,
    read_fires,
)

DUE_MS = 1_900_000_000_000  # 2030-03-17T17:46:40Z
GRACE_MS = 60_000


class FakeClient:
    """What the report needs of a Client: its settings, and ``get`` answered from ``table``."""

    def __init__(self, table: dict[str, TaskStatus] | None = None) -> None:
        self.settings = Settings(table_name="punctual-demo-test", ntp_server=None, default_misfire_grace_ms=GRACE_MS)
        self.table = table or {}
        self.read: list[str] = []

    def get(self, task_id: str) -> Task | None:
        self.read.append(task_id)
        status = self.table.get(task_id)
        if status is None:
            return None
        return Task(task_id=task_id, due_at=from_ms(DUE_MS), action=LogAction(message="demo"), status=status)


def make_plan(steady: int = 3, burst: int = 2) -> DemoPlan:
    """``steady`` tasks due 1 s apart from DUE_MS, and ``burst`` tasks due together at DUE_MS + 1 s."""
    due = {f"demo-r1-s{i:06d}": DUE_MS + 1_000 * i for i in range(steady)}
    burst_ids = frozenset(f"demo-r1-b{i:06d}" for i in range(burst))
    due.update(dict.fromkeys(burst_ids, DUE_MS + 1_000))
    return DemoPlan("r1", due, burst_ids, min(due.values()), max(due.values()))


def fire(task_id: str, fired_ms: float, occurrence: int = 0) -> dict[str, Any]:
    """One fire-log line as the log action writes it."""
    return {
        "event": "fired",
        "task_id": task_id,
        "key": f"{task_id}:{occurrence}",
        "due_ms": 0,
        "fired_ms": fired_ms,
        "message": "demo r1",
    }


def on_time(plan: DemoPlan, drift_ms: float = 1.0) -> list[dict[str, Any]]:
    return [fire(task_id, due + drift_ms) for task_id, due in plan.due_ms.items()]


FIGURES = ("scheduled", "fired", "missed", "failed", "duplicates", "lost")


def figures(report: dict[str, Any]) -> tuple[int, ...]:
    return tuple(report[k] for k in FIGURES)


def test_every_task_fired_once_on_time_is_a_passing_verdict_with_every_figure() -> None:
    # Given a plan of 5 tasks, each fired once 1 ms after its due time
    plan = make_plan()
    client = FakeClient()

    # When the report is built
    report = build_report(client, plan, on_time(plan))  # type: ignore[arg-type]  # a stand-in for the client

    # Then every key of the report is there, 5 fired and nothing else, and the checker passes
    assert set(report) == {
        "run_id",
        "via",
        *FIGURES,
        "drift_ms",
        "steady_drift_ms",
        "burst_drift_ms",
        "webhook_drift_ms",
        "recurring_drift_ms",
        "recurring",
        "checker",
    }
    assert report["run_id"] == "r1"
    assert figures(report) == (5, 5, 0, 0, 0, 0)
    assert report["drift_ms"] == {"p50": 1.0, "p90": 1.0, "p99": 1.0, "max": 1.0}
    assert report["checker"]["ok"] is True
    assert report["checker"]["problems"] == []
    assert report["checker"]["text"].startswith("checker: OK")
    # ... and the table was not read: every task fired
    assert client.read == []
    json.dumps(report)  # `punctual demo --json` prints it as one JSON object


def test_a_duplicate_fire_is_counted_and_fails_the_verdict() -> None:
    # Given every task fired once, and one of them a second time
    plan = make_plan()
    twice = "demo-r1-s000001"
    fires = [*on_time(plan), fire(twice, plan.due_ms[twice] + 7.0)]

    # When the report is built
    report = build_report(FakeClient(), plan, fires)  # type: ignore[arg-type]  # a stand-in for the client

    # Then 5 fired, with 1 duplicate: an unexplained extra fire, so the verdict fails
    assert figures(report) == (5, 5, 0, 0, 1, 0)
    assert report["checker"]["ok"] is False
    assert (report["checker"]["extra"], report["checker"]["unexplained_extras"]) == (1, 1)
    assert report["checker"]["problems"] == ["1 unexplained extra fires"]
    # ... and drift is measured from the first fire of the key, not the duplicate
    assert report["drift_ms"]["max"] == 1.0


def test_a_task_that_never_fired_and_has_no_outcome_is_lost() -> None:
    # Given one task that never fired and is still PENDING in the table, and one the table does not hold at all
    plan = make_plan()
    pending, gone = "demo-r1-s000002", "demo-r1-b000000"
    fires = [f for f in on_time(plan) if f["task_id"] not in (pending, gone)]
    client = FakeClient({pending: TaskStatus.PENDING})

    # When the report is built
    report = build_report(client, plan, fires)  # type: ignore[arg-type]  # a stand-in for the client

    # Then both are lost, and the verdict fails; only the two unfired tasks were read from the table
    assert figures(report) == (5, 3, 0, 0, 0, 2)
    assert report["checker"]["ok"] is False
    assert report["checker"]["problems"] == ["2 lost"]
    assert sorted(client.read) == sorted([pending, gone])
    assert "FAIL: 2 lost" in report["checker"]["text"]


def test_tasks_the_table_records_missed_or_failed_are_explicit_outcomes_not_lost() -> None:
    # Given two tasks that never fired: one recorded MISSED in the table, one FAILED
    plan = make_plan()
    missed, failed = "demo-r1-s000000", "demo-r1-b000001"
    fires = [f for f in on_time(plan) if f["task_id"] not in (missed, failed)]
    client = FakeClient({missed: TaskStatus.MISSED, failed: TaskStatus.FAILED})

    # When the report is built
    report = build_report(client, plan, fires)  # type: ignore[arg-type]  # a stand-in for the client

    # Then they count as missed and failed, none is lost, and the verdict passes
    assert figures(report) == (5, 3, 1, 1, 0, 0)
    assert (report["checker"]["explicitly_missed"], report["checker"]["failed"]) == (1, 1)
    assert report["checker"]["ok"] is True


def test_a_fire_later_than_epsilon_is_reported_late_without_failing_the_verdict() -> None:
    # Given one task fired 25 ms after its due time, the others 1 ms after, and ε = 10 ms
    plan = make_plan()
    late = "demo-r1-s000001"
    fires = [fire(t, due + (25.0 if t == late else 1.0)) for t, due in plan.due_ms.items()]

    # When the report is built
    report = build_report(FakeClient(), plan, fires, epsilon_ms=10)  # type: ignore[arg-type]  # a stand-in for the client

    # Then it is reported late (only a failure when the caller asks), and drift shows it
    assert report["checker"]["late"] == 1
    assert report["checker"]["ok"] is True
    assert report["checker"]["epsilon_ms"] == 10
    assert report["drift_ms"]["max"] == 25.0
    assert f"{late}:0 (+25 ms)" in report["checker"]["text"]


def test_a_fire_at_epsilon_is_not_late_and_one_ms_more_is() -> None:
    # Given two tasks fired exactly ε after their due time and one 1 ms more
    plan = make_plan(steady=3, burst=0)
    ids = sorted(plan.due_ms)
    fires = [
        fire(ids[0], plan.due_ms[ids[0]] + 10.0),
        fire(ids[1], plan.due_ms[ids[1]] + 10.0),
        fire(ids[2], plan.due_ms[ids[2]] + 11.0),
    ]

    # When the report is built with ε = 10 ms
    report = build_report(FakeClient(), plan, fires, epsilon_ms=10)  # type: ignore[arg-type]  # a stand-in for the client

    # Then exactly one fire is late
    assert report["checker"]["late"] == 1


def test_a_fire_earlier_than_epsilon_fails_the_verdict() -> None:
    # Given one task fired 50 ms before its due time
    plan = make_plan()
    early = "demo-r1-s000000"
    fires = [fire(t, due - (50.0 if t == early else -1.0)) for t, due in plan.due_ms.items()]

    # When the report is built with ε = 10 ms
    report = build_report(FakeClient(), plan, fires, epsilon_ms=10)  # type: ignore[arg-type]  # a stand-in for the client

    # Then the verdict fails on it
    assert report["checker"]["early"] == 1
    assert report["checker"]["problems"] == ["1 early beyond ε"]


def test_a_fire_past_the_misfire_grace_fails_the_verdict() -> None:
    # Given one task fired later than its misfire grace (the demo's tasks use the "skip" policy)
    plan = make_plan()
    stale = "demo-r1-s000002"
    fires = [fire(t, due + (GRACE_MS + 5_000.0 if t == stale else 1.0)) for t, due in plan.due_ms.items()]

    # When the report is built
    report = build_report(FakeClient(), plan, fires)  # type: ignore[arg-type]  # a stand-in for the client

    # Then it fired past its grace: a failure, not just late
    assert report["checker"]["past_grace"] == 1
    assert report["checker"]["late"] == 1
    assert report["checker"]["ok"] is False


def test_drift_is_split_between_the_spread_tasks_and_the_burst() -> None:
    # Given spread tasks fired 2 ms late and burst tasks 8 ms late
    plan = make_plan(steady=3, burst=2)
    fires = [fire(t, due + (8.0 if t in plan.burst_ids else 2.0)) for t, due in plan.due_ms.items()]

    # When the report is built
    report = build_report(FakeClient(), plan, fires)  # type: ignore[arg-type]  # a stand-in for the client

    # Then each group's percentiles hold only its own fires
    assert (report["steady_drift_ms"]["count"], report["steady_drift_ms"]["max"]) == (3, 2.0)
    assert (report["burst_drift_ms"]["count"], report["burst_drift_ms"]["min"]) == (2, 8.0)
    assert report["drift_ms"]["max"] == 8.0


def test_the_human_report_prints_the_verdict_under_the_table() -> None:
    # Given a report with one lost task
    plan = make_plan()
    report = build_report(FakeClient(), plan, on_time(plan)[1:])  # type: ignore[arg-type]  # a stand-in for the client

    # When it is formatted
    text = format_report(report)

    # Then the figures come first and the checker's verdict block follows the drift table
    lines = text.splitlines()
    assert lines[0] == "Punctual demo r1 (scheduled through the table)"
    assert "lost 1" in lines[1]
    verdict_at = next(i for i, line in enumerate(lines) if line.strip().startswith("checker:"))
    assert verdict_at > next(i for i, line in enumerate(lines) if line.strip().startswith("burst"))
    assert lines[verdict_at].strip() == "checker: FAIL: 1 lost"


def test_check_fire_log_expects_no_fire_of_a_task_cancelled_by_a_call_that_said_so() -> None:
    # Given two tasks cancelled by calls that reported success: one never fired, one fired anyway
    due = {"load-a": DUE_MS, "load-b": DUE_MS, "load-c": DUE_MS}
    fires = [fire("load-b", DUE_MS + 1.0), fire("load-c", DUE_MS + 1.0)]
    client = FakeClient()

    # When the fire log is checked with both cancellations
    verdict = check_fire_log(client, due, fires, epsilon_ms=10, cancelled=["load-a", "load-b"])  # type: ignore[arg-type]  # a stand-in for the client

    # Then the unfired one is cancelled, the fired one is "fired though cancelled" (a failure), and the table
    # was not asked about either
    assert verdict.cancelled == ("load-a:0",)
    assert verdict.fired_cancelled == ("load-b:0",)
    assert not verdict.ok
    assert client.read == []


# -- punctual demo's exit status -----------------------------------------------------------------------------
@pytest.mark.parametrize(("fired", "code"), [(5, 0), (4, 1)])
def test_punctual_demo_exits_non_zero_when_the_verdict_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fired: int, code: int
) -> None:
    # Given a running stack's state file (this process stands in for it; nothing is contacted), and a demo
    # whose fire log holds ``fired`` of its 5 tasks
    (tmp_path / "stack.json").write_text(
        json.dumps(
            {
                "pid": os.getpid(),
                "endpoint_url": "http://127.0.0.1:9",
                "table_name": "punctual-demo-test",
                "shard_count": 4,
                "poll_interval_ms": 5_000,
                "fire_log": str(tmp_path / "fires.jsonl"),
            }
        )
    )
    plan = make_plan()

    def fake_run_demo(client: Any, fire_log: Path, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return build_report(FakeClient(), plan, on_time(plan)[:fired], epsilon_ms=kwargs["epsilon_ms"])  # type: ignore[arg-type]  # a stand-in for the client

    monkeypatch.setattr(demo, "run_demo", fake_run_demo)

    # When `punctual demo --json` runs
    result = main(["--home", str(tmp_path), "demo", "--json", "--quiet", "--epsilon-ms", "20"])

    # Then its exit status is the checker's verdict, and it printed the report with the checker in it
    report = json.loads(capsys.readouterr().out)
    assert result == code
    assert report["checker"]["ok"] is (code == 0)
    assert report["checker"]["epsilon_ms"] == 20


def test_a_fire_log_tail_parses_only_what_was_appended_and_waits_for_a_partial_line(tmp_path: Path) -> None:
    log = tmp_path / "fires.jsonl"
    tail = FireLogTail(log, "run-a-")
    assert tail.read() == []  # no log yet
    first = {"task_id": "run-a-1", "key": "run-a-1:0", "due_ms": 1, "fired_ms": 2}
    other = {"task_id": "run-b-1", "key": "run-b-1:0", "due_ms": 1, "fired_ms": 2}
    second = {"task_id": "run-a-2", "key": "run-a-2:0", "due_ms": 3, "fired_ms": 4}
    log.write_text(json.dumps(first) + "\n" + json.dumps(other) + "\n" + json.dumps(second)[:10])
    assert tail.read() == [first]  # the half-written line is not taken yet
    with log.open("a") as handle:
        handle.write(json.dumps(second)[10:] + "\n")
    assert tail.read() == [first, second]
    assert tail.read() == [first, second]  # nothing new: nothing added twice
    assert read_fires(log, "run-a-") == [first, second]


def test_a_fire_log_tail_starts_over_when_the_log_is_truncated_and_skips_lines_that_are_not_objects(
    tmp_path: Path,
) -> None:

    log = tmp_path / "fires.jsonl"
    old = {"task_id": "run-a-old-with-a-long-id", "key": "k:0", "due_ms": 1, "fired_ms": 2}
    log.write_text(json.dumps(old) + "\n" + json.dumps("run-a-not-an-object") + "\n" + json.dumps([1]) + "\n")
    tail = FireLogTail(log, "run-a-")
    assert tail.read() == [old]  # valid JSON that is not an object is skipped, not fatal
    new = {"task_id": "run-a-new", "key": "n:0", "due_ms": 3, "fired_ms": 4}
    log.write_text(json.dumps(new) + "\n")  # truncated and rewritten, shorter than before
    assert tail.read() == [new]


@pytest.mark.parametrize("epsilon", ["-1", "nan", "inf", "ten"])
def test_the_demo_refuses_an_epsilon_that_is_not_a_finite_non_negative_number(
    epsilon: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--epsilon-ms", epsilon])
    assert exit_info.value.code == 2
    assert "--epsilon-ms" in capsys.readouterr().err


class SteppingTime:
    """Stands in for the ``time`` module of :mod:`punctual_tools.demo`: ``time()`` only moves when ``sleep`` is
    called, by exactly that long (so a wait's reads and its deadline do not depend on the machine's speed)."""

    def __init__(self, now_s: float) -> None:
        self.now_s = now_s
        self.sleeps: list[float] = []

    def time(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now_s += seconds


def test_a_fire_log_tail_waits_until_every_task_fired_or_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    clock = SteppingTime(1_000_000.0)
    monkeypatch.setattr(demo, "time", clock)
    log = tmp_path / "fires.jsonl"
    fire = {"task_id": "run-a-1", "key": "run-a-1:0", "due_ms": 1, "fired_ms": 2}
    log.write_text(json.dumps(fire) + "\n")
    seen: list[tuple[int, bool]] = []
    far = clock.now_s * 1000 + 60_000
    # Every task fired: the first read ends the wait, reported as the last one, without sleeping
    assert FireLogTail(log, "run-a-").wait(["run-a-1"], far, progress=lambda n, last: seen.append((n, last))) == [fire]
    assert (seen, clock.sleeps) == ([(1, True)], [])
    # One task never fires: the wait reads every 50 ms until the deadline (300 ms on), then ends with what it has
    seen.clear()
    deadline_ms = clock.now_s * 1000 + 300
    entries = FireLogTail(log, "run-a-").wait(
        ["run-a-1", "run-a-2"], deadline_ms, interval_s=0.05, progress=lambda n, last: seen.append((n, last))
    )
    assert entries == [fire]
    assert clock.now_s * 1000 > deadline_ms
    assert set(clock.sleeps) == {0.05}
    assert len(seen) == len(clock.sleeps) + 1 >= 6
    assert seen[-1] == (1, True)
    assert all(not last for _, last in seen[:-1])


def test_webhooks_are_judged_where_the_receiver_got_them_and_kept_apart_from_the_spread_figures(
    tmp_path: Path,
) -> None:

    # Given a plan with 4 spread log tasks and 2 webhooks between them, no burst
    plan = plan_demo(4, 3.0, 0, DUE_MS, 10_000, run_id="r1", lead_ms=0, webhooks=2)
    assert len(plan.webhook_ids) == 2
    assert len(plan.due_ms) == 6
    hooks = sorted(plan.webhook_ids, key=plan.due_ms.__getitem__)
    spread = sorted(set(plan.due_ms) - plan.webhook_ids, key=plan.due_ms.__getitem__)
    assert plan.due_ms[spread[0]] < plan.due_ms[hooks[0]] < plan.due_ms[spread[1]]  # halfway between
    # And a fire log with the log tasks 1 ms late, and a receiver log (its own format) with the webhooks 7 ms late
    fire_log, received = tmp_path / "fires.jsonl", tmp_path / "received.jsonl"
    fire_log.write_text("".join(json.dumps(fire(t, plan.due_ms[t] + 1)) + "\n" for t in spread))
    received.write_text(
        "".join(
            json.dumps({"key": f"{t}:0", "task_id": t, "due_ms": plan.due_ms[t], "received_ms": plan.due_ms[t] + 7.0})
            + "\n"
            for t in hooks
        )
    )
    # When the demo follows both and builds its report
    entries = FireLogTail(fire_log, "demo-r1-", received).read()
    report = build_report(FakeClient(), plan, entries)  # type: ignore[arg-type]  # a stand-in for the client
    # Then all 6 fired on time; the webhooks' drift is the receiver's, the spread row holds only the log tasks
    assert report["fired"] == 6
    assert report["checker"]["ok"]
    assert report["webhook_drift_ms"]["count"] == 2
    assert report["webhook_drift_ms"]["p50"] == pytest.approx(7.0)
    assert report["steady_drift_ms"]["count"] == 4
    assert report["steady_drift_ms"]["max"] == pytest.approx(1.0)
    assert "webhooks (arrival at the loopback receiver)" in format_report(report)


def test_recurring_schedules_expect_every_occurrence_of_their_rate_and_get_a_row_of_their_own() -> None:
    # Given a plan of 3 spread tasks over 2 s and two schedules, every 250 ms and every 1,000 ms
    plan = plan_demo(3, 2.0, 0, DUE_MS, 10_000, run_id="r1", lead_ms=0, recurring_ms=(250, 1000))
    # Then each schedule expects an occurrence at every multiple of its rate from the first due instant to the
    # end of the span, under the occurrence's own task id
    assert [schedule_id for schedule_id, _ in plan.recurring] == ["demo-r1-every250ms", "demo-r1-every1000ms"]
    by_schedule: dict[str, list[int]] = {}
    for task_id in plan.occurrence_ids:
        split = split_occurrence_id(task_id)
        assert split is not None
        assert plan.due_ms[task_id] == split[1]
        by_schedule.setdefault(split[0], []).append(split[1])
    # (half a period after the span's start, so that no occurrence falls on the burst's instant, mid-span)
    first = plan.first_ms
    assert first == plan.first_due_ms
    assert sorted(by_schedule["demo-r1-every250ms"]) == [first + 125 + 250 * k for k in range(8)]
    assert sorted(by_schedule["demo-r1-every1000ms"]) == [first + 500, first + 1500]
    assert all(plan.due_ms[t] != first + 1_000 for t in plan.occurrence_ids)  # mid-span: where a burst would be
    assert len(plan.due_ms) == 3 + 8 + 2
    # When they fire 2 ms late and the spread tasks 1 ms late, but one occurrence never fires
    missing = max(plan.occurrence_ids)
    entries = [fire(t, due + (2 if "@" in t else 1)) for t, due in plan.due_ms.items() if t != missing]
    report = build_report(FakeClient(), plan, entries)  # type: ignore[arg-type]  # a stand-in for the client
    # Then the occurrences have their own drift row, the spread row keeps only the one-off tasks, and the
    # unfired occurrence is lost: the verdict fails
    assert report["recurring_drift_ms"]["count"] == 9
    assert report["recurring_drift_ms"]["p50"] == pytest.approx(2.0)
    assert report["steady_drift_ms"]["count"] == 3
    assert report["steady_drift_ms"]["max"] == pytest.approx(1.0)
    assert report["lost"] == 1
    assert not report["checker"]["ok"]
    assert "recurring (2 schedules, sub-second rates)" in format_report(report)


def test_loopback_webhooks_need_the_receiver_address_allowed() -> None:
    assert not demo.loopback_allowed("")
    assert not demo.loopback_allowed("10.0.0.0/8, hooks.example.com")
    assert demo.loopback_allowed("127.0.0.1")
    assert demo.loopback_allowed("hooks.example.com,127.0.0.0/8")
