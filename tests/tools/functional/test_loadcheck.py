"""The load test's check (punctual_tools.loadcheck): the ledgers the users kept, judged against a fire log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from punctual import LogAction
from punctual.config.settings import Settings
from punctual.domain.keys import from_ms
from punctual.domain.model import Task, occurrence_id
from punctual.domain.schedules import Schedule, instants_after
from punctual.scheduling.client import Client
from punctual_tools.doubles.memory import InMemoryStore
from punctual_tools.loadcheck import DUE, UNKNOWN, Expectation, ScheduleExpectation, check_ledgers
from support import FakeClock

PREFIX = "load-run1-"


class LandsLate(Client):
    """A client whose first read of ``late_id`` finds nothing and then stores it: the write of a call its user was
    stopped in the middle of, which the server finished after the check's first read."""

    def __init__(self, *args: Any, late_id: str, due_ms: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.late_id, self.late_due_ms, self.reads = late_id, due_ms, 0

    def get(self, task_id: str) -> Task | None:
        found = super().get(task_id)
        if task_id == self.late_id:
            self.reads += 1
            if self.reads == 1:
                self.schedule(from_ms(self.late_due_ms), LogAction(message="load"), {}, task_id=task_id)
        return found

    def get_schedule(self, schedule_id: str) -> Schedule | None:
        found = super().get_schedule(schedule_id)
        if schedule_id == self.late_id:
            self.reads += 1
            if self.reads == 1:
                self.create_schedule(
                    schedule_id,
                    "rate(2 seconds)",
                    LogAction(message="load recurring"),
                    {},
                    start_at=from_ms(self.late_due_ms),
                    end_at=from_ms(self.late_due_ms + 6_000),
                )
        return found


def fire_log(tmp_path: Path, fires: dict[str, int]) -> Path:
    path = tmp_path / "fires.jsonl"
    path.write_text(
        "".join(json.dumps({"task_id": t, "key": f"{t}:0", "fired_ms": at}) + "\n" for t, at in fires.items())
    )
    return path


@pytest.fixture(autouse=True)
def _no_landing_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """The calls here land at once: no need to give a cut-off request time to land before the second read."""
    monkeypatch.setattr("punctual_tools.loadcheck.LANDING_S", 0.0)


@pytest.fixture
def client(settings: Settings, now_ms: int) -> LandsLate:
    """A client on the in-memory store: the check reads tasks and schedules back, nothing of DynamoDB's."""
    store = InMemoryStore.from_settings(settings)
    return LandsLate(
        settings,
        store,
        store,
        clock=FakeClock(wall_ms=now_ms),
        late_id=f"{PREFIX}late",
        due_ms=now_ms + 40_000,
    )


def test_a_call_that_lands_after_the_first_read_is_expected_not_an_extra_fire(
    client: LandsLate, tmp_path: Path, now_ms: int
) -> None:
    # Given one task a call reported stored, and one whose call was cut off (unknown) that the server stored later
    due = now_ms + 30_000
    client.schedule(from_ms(due), LogAction(message="load"), {}, task_id=f"{PREFIX}known")
    ledger = {f"{PREFIX}known": Expectation(DUE, due), f"{PREFIX}late": Expectation(UNKNOWN, 0)}
    log = fire_log(tmp_path, {f"{PREFIX}known": due + 3, f"{PREFIX}late": client.late_due_ms + 4})

    # When the check reads the ledgers and the fire log
    verdict = check_ledgers(client, log, PREFIX, ledger, {}, margin_s=0, epsilon_ms=1_000)  # type: ignore[arg-type]  # a stand-in for the client

    # Then the late one was read again, found, and expected: both fired once, nothing extra
    assert client.reads >= 2
    assert verdict.ok, verdict.format("check")
    assert (verdict.expected, len(verdict.matched), len(verdict.extra)) == (2, 2, 0)


def test_a_fire_no_call_accounts_for_fails_the_check(client: LandsLate, tmp_path: Path, now_ms: int) -> None:
    # Given a ledger with one task, and a fire log with that task and one of the run's ids nobody scheduled
    due = now_ms + 30_000
    client.schedule(from_ms(due), LogAction(message="load"), {}, task_id=f"{PREFIX}known")
    ledger = {f"{PREFIX}known": Expectation(DUE, due)}
    log = fire_log(tmp_path, {f"{PREFIX}known": due + 3, f"{PREFIX}stranger": due + 5})

    # When the check runs
    verdict = check_ledgers(client, log, PREFIX, ledger, {}, margin_s=0, epsilon_ms=1_000)  # type: ignore[arg-type]  # a stand-in for the client

    # Then the stranger is an extra fire, and the verdict fails
    assert not verdict.ok
    assert len(verdict.extra) == 1


def test_a_schedule_whose_create_lands_after_the_first_read_is_expected_not_extra_fires(
    client: LandsLate, tmp_path: Path, now_ms: int
) -> None:
    # Given a task a call reported stored, and a recurring schedule whose create was cut off (its effect unknown)
    # that the server stored after the check's first read, and whose occurrences all fired
    due = now_ms + 30_000
    client.schedule(from_ms(due), LogAction(message="load"), {}, task_id=f"{PREFIX}known")
    ledger = {f"{PREFIX}known": Expectation(DUE, due)}
    schedules = {client.late_id: ScheduleExpectation(None)}
    start = client.late_due_ms
    instants = [start + k * 2_000 for k in range(4)]  # rate(2 seconds) from start to start + 6 s
    fires = {f"{PREFIX}known": due + 3} | {occurrence_id(client.late_id, at): at + 2 for at in instants}
    log = fire_log(tmp_path, fires)

    # When the check reads the ledgers and the fire log
    verdict = check_ledgers(client, log, PREFIX, ledger, schedules, margin_s=0, epsilon_ms=1_000)  # type: ignore[arg-type]  # a stand-in for the client

    # Then the schedule was read again and its occurrences expected: everything fired once, nothing extra
    stored = client.get_schedule(client.late_id)
    assert stored is not None
    assert list(instants_after(stored, 0)) == instants
    assert client.reads >= 2
    assert verdict.ok, verdict.format("check")
    assert (verdict.expected, len(verdict.matched), len(verdict.extra)) == (5, 5, 0)
