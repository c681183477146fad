"""Load test: many users scheduling tasks through the client helper against a running local stack, judged at the
end by the checker (:mod:`punctual_tools.checker`).

    .venv/bin/pip install -e '.[load]'                        # (also in the dev extra)
    .venv/bin/punctual up &                                   # or any stack: set PUNCTUAL_* for AWS
    .venv/bin/locust -f loadtest/locustfile.py --headless -u 20 -r 5 -t 60s

Each user schedules ``log`` tasks due ``LOAD_LEAD_S`` ahead (default ``30,90``: a random lead between 30 and 90 s,
the poller's lead window; ``"5,15"`` or a single ``"10"`` for a shorter run), with a small JSON payload, and now
and then reads one back, cancels one or reschedules one. Now and then it also makes a recurring schedule
(``rate(N seconds)``, N of 1, 2 or 5, starting within the lead and lasting ``LOAD_SCHEDULE_S``, default 10 s) and
sometimes pauses one of its schedules. Locust reports the client-side latency of each call.

Each user keeps a ledger of what its calls reported: task id -> the due time it should fire at, or "cancelled",
or "unknown" (the call failed in a way that does not say whether it took effect, or the user was stopped in the
middle of it; the table decides afterwards). A cancel or reschedule that loses to the executor (the task was
already armed: :class:`~punctual.errors.TaskStateError`) leaves the task due when it was, as the call reported.

When the test stops, the load test waits (bounded: until the last due time + ``LOAD_MARGIN_S``, default 15 s,
or until every expected task fired; a progress line on stderr), reads the stack's fire log (the path is in the
stack's state file, ``<LOAD_HOME>/stack.json``, default ``.punctual``) and the table outcome of every task that
did not fire (a schedule's occurrences are computed from its definition: every instant up to its end, or up to
the moment it was paused, plus whatever occurrence it had made beyond that), runs the checker
(``LOAD_EPSILON_MS``, default 1000, is its tolerance for late / early), prints the verdict, and makes locust exit
with status 1 when the verdict fails. Without a local stack (no state file: a stack in AWS, whose log action
writes to CloudWatch) there is no fire log to read, and the check is skipped.

With ``LOAD_VIA=api`` the users go through the REST API (the local stack's, with its token; or, with
``PUNCTUAL_API_URL`` set, a deployed one, SigV4-signed) instead of writing the table: the same calls, the same
ledger, and the same check (the checker reads the table directly, the API's tasks under the tenant ``local``).

Traffic goes only to the stack's endpoint (loopback for the local stack). The run is bounded by ``-t``, and the
check by the last due time + the margin. The checks run where the users run (locust's default local runner).
"""

from __future__ import annotations

import os
import random
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from locust import User, between, events, task
from locust.env import Environment
from locust.runners import STATE_RUNNING, STATE_SPAWNING, MasterRunner

from punctual import Client, LogAction, Settings
from punctual.domain.model import TaskStatus
from punctual.domain.tenancy import qualify
from punctual.errors import (
    InvalidTaskError,
    ScheduleConflictError,
    ScheduleNotFoundError,
    ScheduleStateError,
    TaskConflictError,
    TaskStateError,
)
from punctual.scheduling.api_client import ApiClient
from punctual_tools.checker import Verdict, occurrence_due_ms
from punctual_tools.loadcheck import (
    CANCELLED,
    DUE,
    UNKNOWN,
    Expectation,
    ScheduleExpectation,
    check_ledgers,
)
from punctual_tools.local.api_server import LOCAL_TENANT
from punctual_tools.local.stack import read_state
from punctual_tools.progress import ProgressLine

ROOT = Path(__file__).resolve().parents[1]
PAUSE_IDLE_CHANCE = 0.5  # how often a turn of the pause task does nothing (else it pauses a running schedule)
LEAD_BOUNDS = 2  # LOAD_LEAD_S gives MIN,MAX


# -- configuration (plain LOAD_* variables: PUNCTUAL_* ones are Settings fields) -------------------------------
def lead_range(raw: str) -> tuple[float, float]:
    """``"30,90"`` -> (30.0, 90.0); ``"10"`` -> (10.0, 10.0). Raises ValueError naming LOAD_LEAD_S."""
    try:
        parts = [float(p) for p in raw.split(",")]
    except ValueError:
        parts = []
    if len(parts) == 1:
        parts *= 2
    if len(parts) != LEAD_BOUNDS or not 0 < parts[0] <= parts[1]:
        raise ValueError(f"LOAD_LEAD_S={raw!r}: give seconds ahead as 'MIN,MAX' (0 < MIN <= MAX) or one number")
    return parts[0], parts[1]


def _number(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name}={raw!r}: give a number") from None
    if value < 0:
        raise ValueError(f"{name}={raw!r}: give a number >= 0")
    return value


LEAD_S = lead_range(os.environ.get("LOAD_LEAD_S", "30,90"))
MARGIN_S = _number("LOAD_MARGIN_S", 15.0)
EPSILON_MS = _number("LOAD_EPSILON_MS", 1_000.0)
SCHEDULE_S = _number("LOAD_SCHEDULE_S", 10.0)
HOME = Path(os.environ.get("LOAD_HOME") or ROOT / ".punctual")
VIA = os.environ.get("LOAD_VIA", "client")
if VIA not in ("client", "api"):
    raise ValueError(f"LOAD_VIA={VIA!r}: give client (the table, through punctual.Client) or api (the REST API)")


def _stack() -> dict[str, Any] | None:
    return read_state(HOME)


def _settings() -> Settings:
    state = _stack()
    if state:
        return Settings.from_env(
            endpoint_url=state["endpoint_url"], table_name=state["table_name"], shard_count=state["shard_count"]
        )
    return Settings.from_env()


def _user_client() -> Any:
    """What a user schedules with: the direct client, or with ``LOAD_VIA=api`` the REST API's."""
    if VIA == "client":
        return Client(_settings())
    settings = _settings()
    if settings.api_url:
        return ApiClient.from_settings(settings)
    state = _stack() or {}
    if not state.get("api_url"):
        raise RuntimeError(f"LOAD_VIA=api: the stack in {HOME} serves no API, and PUNCTUAL_API_URL is not set")
    return ApiClient(state["api_url"], token=Path(state["api_token_file"]).read_text().strip())


def _stored(task_id: str) -> str:
    """The table's id of a task the users named: through the local API, the tenant ``local``'s."""
    return qualify(LOCAL_TENANT, task_id) if VIA == "api" else task_id


def _due_in_lead() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=random.uniform(*LEAD_S))


class Run:
    """One test run: its task-id prefix and every user's ledgers (tasks and recurring schedules)."""

    def __init__(self) -> None:
        self.run_id = uuid.uuid4().hex[:8]
        self.ledgers: list[dict[str, Expectation]] = []
        self.schedules: list[dict[str, ScheduleExpectation]] = []

    @property
    def prefix(self) -> str:
        return f"load-{self.run_id}-"


RUN = Run()


@events.test_start.add_listener
def _new_run(environment: Environment, **_: Any) -> None:
    global RUN  # noqa: PLW0603  the run every user of this process shares, new at each test start
    RUN = Run()


class SchedulingUser(User):
    wait_time = between(0.05, 0.2)

    def on_start(self) -> None:
        self.client = _user_client()
        self.mine: list[str] = []  # tasks this user may still read, cancel or reschedule
        self.ledger: dict[str, Expectation] = {}
        self.prefix = RUN.prefix
        RUN.ledgers.append(self.ledger)
        self.schedules: dict[str, ScheduleExpectation] = {}
        RUN.schedules.append(self.schedules)

    def _call(
        self, name: str, fn: Callable[..., Any], *args: Any, expected: tuple[type[Exception], ...] = (), **kwargs: Any
    ) -> tuple[Any, Exception | None]:
        """Run one client call, report it to locust, and return (result, exception). An exception in
        ``expected`` is an answer the scenario allows (reported under ``"<name>: <error class>"``, not a
        failure)."""
        start = time.perf_counter()
        exception: Exception | None = None
        result = None
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - reported to locust
            exception = exc
        allowed = isinstance(exception, expected)
        events.request.fire(
            request_type=f"punctual-{VIA}",
            name=f"{name}: {type(exception).__name__}" if allowed else name,
            response_time=(time.perf_counter() - start) * 1000,
            response_length=0,
            exception=None if allowed else exception,
            context={},
        )
        return result, exception

    def _settled(self, task_id: str, exc: TaskStateError) -> None:
        """A change lost (the task was armed, or already finished): it keeps the due time, or the cancellation, that
        the error's copy of the task shows."""
        if exc.task is not None:
            state = CANCELLED if exc.task.status is TaskStatus.CANCELLED else DUE
            self.ledger[task_id] = Expectation(state, occurrence_due_ms(exc.task))
        else:
            self.ledger[task_id] = Expectation(UNKNOWN, self.ledger[task_id].due_ms)

    @task(20)
    def schedule(self) -> None:
        task_id = f"{self.prefix}{uuid.uuid4().hex[:12]}"
        due = _due_in_lead()
        # Unknown until the call returns: a user stopped in the middle of it leaves it for the table to decide.
        self.ledger[task_id] = Expectation(UNKNOWN, 0)
        stored, exc = self._call(
            "schedule", self.client.schedule, due, LogAction(message="load"), {"n": random.random()}, task_id=task_id
        )
        if exc is None:
            self.ledger[task_id] = Expectation(DUE, stored.due_ms)
            self.mine.append(task_id)
        elif isinstance(exc, InvalidTaskError | TaskConflictError):
            del self.ledger[task_id]  # refused: nothing was stored

    @task(3)
    def get(self) -> None:
        if self.mine:
            self._call("get", self.client.get, random.choice(self.mine))

    @task(1)
    def reschedule(self) -> None:
        if not self.mine:
            return
        task_id = random.choice(self.mine)
        before = self.ledger[task_id]
        self.ledger[task_id] = Expectation(UNKNOWN, before.due_ms)
        moved, exc = self._call(
            "reschedule", self.client.reschedule, task_id, _due_in_lead(), expected=(TaskStateError,)
        )
        if exc is None:
            self.ledger[task_id] = Expectation(DUE, moved.due_ms)
        elif isinstance(exc, TaskStateError):
            self._settled(task_id, exc)
        elif isinstance(exc, InvalidTaskError):
            self.ledger[task_id] = before  # refused before any write

    @task(1)
    def cancel(self) -> None:
        if not self.mine:
            return
        task_id = self.mine.pop(random.randrange(len(self.mine)))
        before = self.ledger[task_id]
        self.ledger[task_id] = Expectation(UNKNOWN, before.due_ms)
        _, exc = self._call("cancel", self.client.cancel, task_id, expected=(TaskStateError,))
        if exc is None:
            self.ledger[task_id] = Expectation(CANCELLED, before.due_ms)
        elif isinstance(exc, TaskStateError):
            self._settled(task_id, exc)

    @task(1)
    def recurring(self) -> None:
        schedule_id = f"{self.prefix}r{uuid.uuid4().hex[:8]}"
        start = _due_in_lead()
        self.schedules[schedule_id] = ScheduleExpectation(None)
        made, exc = self._call(
            "create_schedule",
            self.client.create_schedule,
            schedule_id,
            f"rate({random.choice((1, 2, 5))} seconds)",
            LogAction(message="load recurring"),
            {"n": random.random()},
            start_at=start,
            end_at=start + timedelta(seconds=SCHEDULE_S),
        )
        if exc is None:
            self.schedules[schedule_id] = ScheduleExpectation(made)
        elif isinstance(exc, InvalidTaskError | ScheduleConflictError):
            del self.schedules[schedule_id]  # refused: nothing was stored

    @task(1)
    def pause(self) -> None:
        running = [sid for sid, e in self.schedules.items() if e.schedule is not None and e.paused_from_ms is None]
        if not running or random.random() < PAUSE_IDLE_CHANCE:
            return
        schedule_id = random.choice(running)
        before = self.schedules[schedule_id]
        # From the moment the call starts, whatever its outcome: a pause that failed midway is finished by a poll.
        self.schedules[schedule_id] = ScheduleExpectation(before.schedule, int(time.time() * 1000))
        _, exc = self._call(
            "pause_schedule",
            self.client.pause_schedule,
            schedule_id,
            expected=(ScheduleStateError, ScheduleNotFoundError),
        )
        if isinstance(exc, ScheduleStateError | ScheduleNotFoundError):
            self.schedules[schedule_id] = before  # it had ended: nothing changed


def check_run(run: Run) -> Verdict | None:
    """Wait for the run's expected fires (bounded), then the checker's verdict; None when there is nothing to
    read (no local stack) or nothing was scheduled."""
    state = _stack()
    if not state or not state.get("fire_log"):
        print(
            f"load test check skipped: no local stack state in {HOME} (set LOAD_HOME), so no fire log to read",
            flush=True,
        )
        return None
    ledger = {_stored(task_id): e for user_ledger in run.ledgers for task_id, e in list(user_ledger.items())}
    schedules = {_stored(sid): e for user_schedules in run.schedules for sid, e in list(user_schedules.items())}
    if not ledger and not schedules:
        print("load test check skipped: nothing was scheduled", flush=True)
        return None
    line = ProgressLine(sys.stderr)

    def show(fired: int, expected: int, left_s: float, last: bool) -> None:
        text = f"load test check: {fired}/{expected} expected tasks fired, waiting at most {left_s:.0f} s more"
        if last:
            line.end(text)
        else:
            line.show(text)

    try:
        verdict = check_ledgers(
            Client(_settings()),
            Path(state["fire_log"]),
            _stored(run.prefix),
            ledger,
            schedules,
            margin_s=MARGIN_S,
            epsilon_ms=EPSILON_MS,
            progress=show,
        )
    except KeyboardInterrupt:
        line.end()
        print("load test check interrupted: no verdict", flush=True)
        return None
    print(verdict.format(f"load test {run.run_id} checker"), flush=True)
    return verdict


@events.test_stop.add_listener
def _check_on_stop(environment: Environment, **_: Any) -> None:
    if isinstance(environment.runner, MasterRunner):
        return  # the users, their ledgers and the checks are on the workers
    verdict = check_run(RUN)
    if verdict is not None and not verdict.ok:
        environment.process_exit_code = 1


@events.quitting.add_listener
def _stop_before_quitting(environment: Environment, **_: Any) -> None:
    """On Ctrl-C or SIGTERM locust fires ``quitting`` before it stops the users: stop them now, so that the check
    (on ``test_stop``) runs before locust decides its exit status."""
    runner = environment.runner
    if runner is not None and not isinstance(runner, MasterRunner) and runner.state in (STATE_RUNNING, STATE_SPAWNING):
        runner.stop()
