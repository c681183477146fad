"""The demo: schedule N tasks spread over S seconds plus a burst of B at one instant (and, beside them, a few
recurring schedules with sub-second rates over the same seconds), watch them fire, report.

Fires are observed at the target: every task's action is ``log``, which appends one line per fire to the
stack's fire log (a JSON-lines file shared by all executor processes). The report's figures come from the
checker (:mod:`punctual_tools.checker`), fed with the plan, the fire log, and the table's outcome for each task that
did not fire: fired (matched), duplicates (extra fires of a key), missed and failed (explicit outcomes in the
table), lost (neither fired nor finished), late / early beyond ε, and drift percentiles measured when each
action started. :func:`check_fire_log` is the same judgement for any plan; the load test uses it too.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path
from typing import Any, TextIO

from punctual.domain.keys import from_ms, next_tick
from punctual.domain.model import Action, TaskStatus, is_occurrence_id, occurrence_id
from punctual.domain.tenancy import qualify, unqualify
from punctual.network.policy import TargetPolicy
from punctual.runtime.client import Client
from punctual.targets import HttpAction, LogAction
from punctual_tools.checker import Fire, Verdict, check, expected_from_due, fires_from_fire_log
from punctual_tools.local.receiver import start_receiver
from punctual_tools.progress import ProgressLine

EPSILON_MS = 10.0  # the demo's "late" / "early" tolerance: the precision Punctual aims at (p99 <= 10 ms)
RECEIVER_HOST = "127.0.0.1"  # the demo's webhook receiver listens here


@dataclass(frozen=True)
class DemoPlan:
    run_id: str
    due_ms: dict[str, int]  # task id -> due instant
    burst_ids: frozenset[str]
    first_due_ms: int
    last_due_ms: int
    webhook_ids: frozenset[str] = frozenset()  # POSTed to the demo's loopback receiver, not logged
    recurring: tuple[tuple[str, int], ...] = ()  # (schedule id, rate ms): each over the span
    span_ms: int = 0
    first_ms: int = 0  # where the span starts
    tenant: str | None = None  # scheduled through the API as this tenant: every id above is the table's

    @property
    def prefix(self) -> str:
        """What every task id of the plan starts with (in the table and the fire log)."""
        return demo_prefix(self.run_id, self.tenant)

    def name(self, task_id: str) -> str:
        """The id the scheduler is given: the tenant-free one when the plan goes through the API."""
        return task_id if self.tenant is None else unqualify(self.tenant, task_id) or task_id

    @property
    def occurrence_ids(self) -> frozenset[str]:
        """The task ids of the recurring schedules' occurrences in the plan."""
        return frozenset(task_id for task_id in self.due_ms if is_occurrence_id(task_id))


def demo_prefix(run_id: str, tenant: str | None) -> str:
    """What the ids of a demo run start with: ``demo-<run>-``, after ``<tenant>/`` when it goes through the API."""
    base = f"demo-{run_id}-"
    return base if tenant is None else qualify(tenant, base)


def plan_demo(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
    tasks: int,
    over_s: float,
    burst: int,
    now_ms: int,
    poll_interval_ms: int,
    *,
    run_id: str | None = None,
    lead_ms: int = 10_000,
    webhooks: int = 0,
    recurring_ms: Sequence[int] = (),
    tenant: str | None = None,
) -> DemoPlan:
    """Due times: ``tasks`` evenly over ``over_s`` seconds and ``burst`` at the middle instant, and ``webhooks``
    more evenly over the same seconds, halfway between the others; and one recurring schedule per rate in
    ``recurring_ms`` (``rate(N milliseconds)``, from half a period after the first due instant to the end of
    the span), whose occurrences the plan expects at every multiple of its rate (a rate counts from its start).

    Everything is due at least ``lead_ms`` after the first poll tick that comes once scheduling is surely
    done: the poller dispatches tasks ahead of time (30-90 s in AWS), which is what the demo shows; tasks
    scheduled closer to their due time than one poll interval are the stream fast path's job.
    """
    run_id = run_id or uuid.uuid4().hex[:8]
    prefix = demo_prefix(run_id, tenant)
    scheduling_ms = 2_000 + 3 * (tasks + burst + webhooks)
    first = next_tick(now_ms + scheduling_ms, poll_interval_ms) + lead_ms
    span_ms = int(over_s * 1000)
    due = {f"{prefix}s{i:06d}": first + (span_ms * i // max(tasks - 1, 1) if tasks > 1 else 0) for i in range(tasks)}
    burst_at = first + span_ms // 2
    burst_ids = frozenset(f"{prefix}b{i:06d}" for i in range(burst))
    due.update({task_id: burst_at for task_id in burst_ids})
    step = span_ms / max(webhooks, 1)
    webhook_due = {f"{prefix}w{i:06d}": first + int(step * (i + 0.5)) for i in range(webhooks)}
    due.update(webhook_due)
    recurring = tuple((f"{prefix}every{rate}ms", rate) for rate in recurring_ms)
    for schedule_id, rate in recurring:
        start = first + rate // 2  # half a period in: its own row, not the burst's instant (first + span / 2)
        due.update({occurrence_id(schedule_id, at): at for at in range(start, first + span_ms + 1, rate)})
    return DemoPlan(
        run_id,
        due,
        burst_ids,
        min(due.values(), default=first),
        max(due.values(), default=first),
        frozenset(webhook_due),
        recurring,
        span_ms,
        first,
        tenant,
    )


class _Follow:
    """One JSON-lines file followed from where the last read stopped (a file truncated or replaced is read
    again from its start)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[dict[str, Any]] = []
        self._offset = 0
        self._inode: int | None = None

    def new_lines(self) -> list[bytes]:
        try:
            with self.path.open("rb") as handle:
                stat = os.fstat(handle.fileno())
                if stat.st_size < self._offset or (self._inode is not None and stat.st_ino != self._inode):
                    self._offset, self.entries = 0, []  # truncated or replaced: read the new file from its start
                self._inode = stat.st_ino
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1  # a line being written right now waits for the next read
        self._offset += end
        return data[:end].splitlines()


class FireLogTail:
    """Follows a fire log: each :meth:`read` parses only what was appended since the last one (a watcher that
    re-parsed the whole log every half second would take a core from the executors it watches), and returns
    every entry so far whose task id starts with ``prefix``.

    With ``received``, the log of the demo's webhook receiver (:mod:`punctual_tools.local.receiver`) is followed
    too: each request it got is an entry of the same shape, its ``fired_ms`` the instant the receiver read it
    (``at: "receiver"``), so a webhook's drift is measured where its target stands.
    """

    def __init__(self, fire_log: Path, prefix: str, received: Path | None = None) -> None:
        self.path = fire_log
        self.prefix = prefix
        self._files = [(_Follow(fire_log), False)] + ([(_Follow(received), True)] if received else [])

    @property
    def entries(self) -> list[dict[str, Any]]:
        return [entry for follow, _ in self._files for entry in follow.entries]

    def read(self) -> list[dict[str, Any]]:
        prefix = self.prefix.encode()
        for follow, at_receiver in self._files:
            for line in follow.new_lines():
                if prefix not in line:
                    continue
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # not a fire-log line
                task_id = entry.get("task_id") if isinstance(entry, dict) else None
                if not (isinstance(task_id, str) and task_id.startswith(self.prefix)):
                    continue
                if at_receiver:
                    entry = {
                        "key": entry.get("key"),
                        "task_id": task_id,
                        "fired_ms": entry["received_ms"],
                        "at": "receiver",
                    }
                follow.entries.append(entry)
        return self.entries

    def wait(
        self,
        task_ids: Collection[str],
        until_ms: float,
        interval_s: float = 1.0,
        progress: Callable[[int, bool], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Read every ``interval_s`` until each of ``task_ids`` has fired or the wall clock passes ``until_ms``;
        ``progress(fired, last)`` after each read. Returns every entry read so far."""
        wanted = set(task_ids)
        while True:
            fired = len({entry["task_id"] for entry in self.read()} & wanted)
            last = fired >= len(wanted) or time.time() * 1000 > until_ms
            if progress is not None:
                progress(fired, last)
            if last:
                return self.entries
            time.sleep(interval_s)


def read_fires(fire_log: Path, prefix: str) -> list[dict[str, Any]]:
    """Fire-log entries whose task id starts with ``prefix`` (one pass over the whole log)."""
    return list(FireLogTail(fire_log, prefix).read())


def _bar(done: int, total: int, width: int = 30) -> str:
    filled = width * done // max(total, 1)
    return "[" + "#" * filled + "." * (width - filled) + "]"


def loopback_allowed(allowed_targets: str, port: int | None = None) -> bool:
    """Whether a target list (``PUNCTUAL_ALLOWED_TARGETS``) lets webhooks reach the demo's loopback receiver on
    ``port`` (None: on any port)."""
    return TargetPolicy.from_settings(allowed_targets).is_allowed_address(ip_address(RECEIVER_HOST), port=port)


def run_demo(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
    client: Client,
    fire_log: Path,
    tasks: int,
    over_s: float,
    burst: int,
    *,
    poll_interval_ms: int,
    out: TextIO | None = sys.stderr,
    schedule_threads: int = 16,
    epsilon_ms: float = EPSILON_MS,
    webhooks: int = 0,
    recurring_ms: Sequence[int] = (),
    api: Any = None,
    tenant: str | None = None,
    receiver_port: int = 0,
) -> dict[str, Any]:
    """Schedule, wait (with a progress bar on ``out``), and return the report as a dict (see
    :func:`build_report`). ``recurring_ms``: the rates of the recurring schedules made beside the tasks.
    ``webhooks`` tasks POST to a loopback receiver started here on ``receiver_port`` (0: any free one; in a
    process of its own), which the stack's executors and ``client`` must be allowed to reach
    (``PUNCTUAL_ALLOWED_TARGETS``, and through the API the tenant's targets: the stack's ``receiver_port``).
    With ``api`` (an :class:`~punctual.scheduling.api_client.ApiClient` whose caller is ``tenant``) everything is
    scheduled through the REST API; ``client`` (the table) still checks the outcomes."""
    plan = plan_demo(
        tasks,
        over_s,
        burst,
        int(time.time() * 1000),
        poll_interval_ms,
        webhooks=webhooks,
        recurring_ms=recurring_ms,
        tenant=tenant if api is not None else None,
    )
    prefix = plan.prefix
    grace = client.settings.default_misfire_grace_ms
    received = fire_log.parent / f"demo-{plan.run_id}-received.jsonl" if plan.webhook_ids else None
    receiver = None
    try:
        if received is not None:
            receiver, port = start_receiver(received, receiver_port)
            hook: Action = HttpAction(url=f"http://{RECEIVER_HOST}:{port}/demo/{plan.run_id}")
        log_action: Action = LogAction(message=f"demo {plan.run_id}")
        return _run_plan(
            client,
            api or client,
            fire_log,
            received,
            plan,
            prefix=prefix,
            grace=grace,
            out=out,
            schedule_threads=schedule_threads,
            epsilon_ms=epsilon_ms,
            action_of=lambda task_id: hook if task_id in plan.webhook_ids else log_action,
        )
    finally:
        if receiver is not None:
            receiver.terminate()
            receiver.join(5)


def _run_plan(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
    client: Client,
    scheduler: Any,
    fire_log: Path,
    received: Path | None,
    plan: DemoPlan,
    *,
    prefix: str,
    grace: int,
    out: TextIO | None,
    schedule_threads: int,
    epsilon_ms: float,
    action_of: Callable[[str], Action],
) -> dict[str, Any]:
    def schedule(item: tuple[str, int]) -> None:
        scheduler.schedule(from_ms(item[1]), action_of(item[0]), {"run": plan.run_id}, task_id=plan.name(item[0]))

    started = time.monotonic()
    total = len(plan.due_ms)
    progress = ProgressLine(out)
    for schedule_id, rate in plan.recurring:
        scheduler.create_schedule(
            plan.name(schedule_id),
            f"rate({rate} milliseconds)",
            action_of(schedule_id),
            {"run": plan.run_id},
            start_at=from_ms(plan.first_ms + rate // 2),
            end_at=from_ms(plan.first_ms + plan.span_ms),
        )
    occurrences = plan.occurrence_ids
    one_offs = [item for item in plan.due_ms.items() if item[0] not in occurrences]
    with ThreadPoolExecutor(max_workers=schedule_threads) as pool:
        for i, _ in enumerate(pool.map(schedule, one_offs), len(plan.due_ms) - len(one_offs) + 1):
            if i % 50 == 0 or i == total:
                progress.show(f"scheduling {_bar(i, total)} {i}/{total}")
    progress.end(f"scheduling {_bar(total, total)} {total}/{total}  ({time.monotonic() - started:.1f} s)")

    progress = ProgressLine(out)

    def show(fired: int, last: bool) -> None:
        now = time.time() * 1000
        wait = (plan.first_due_ms - now) / 1000
        left = max(0.0, (plan.last_due_ms - now) / 1000)
        note = f"first due in {wait:.0f} s" if wait > 0 else f"last due in {left:.0f} s"
        line = f"waiting    {_bar(fired, total)} {fired}/{total} fired  ({note})"
        if last:
            progress.end(line)
        else:
            progress.show(line)

    tail = FireLogTail(fire_log, prefix, received)
    tail.wait(plan.due_ms, plan.last_due_ms + min(grace, 30_000) + 15_000, interval_s=0.5, progress=show)
    time.sleep(1.0)  # let the last outcomes be recorded
    return build_report(client, plan, list(tail.read()), epsilon_ms)


def check_fire_log(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
    client: Client,
    due_ms: Mapping[str, int],
    fires: Iterable[Mapping[str, Any]],
    *,
    epsilon_ms: float,
    grace_ms: float | None = None,
    cancelled: Iterable[str] = (),
    late_is_failure: bool = False,
) -> Verdict:
    """The checker's verdict on a plan (``task id -> due ms``, occurrence 0) against fire-log entries.

    Each planned task that did not fire is read from the table, so that an explicit outcome (MISSED, FAILED)
    is told apart from a lost task. Tasks in ``cancelled`` were cancelled by a call that said so: they must not
    fire (their table status is not read). ``grace_ms``, when given, is every task's misfire grace (a fire past
    it fails the verdict: the tasks use the ``skip`` policy).
    """
    observed = fires_from_fire_log(fires)
    seen = {fire.key for fire in observed}
    dropped = set(cancelled)
    unfired = [e.task_id for e in expected_from_due(due_ms) if e.key not in seen and e.task_id not in dropped]
    with ThreadPoolExecutor(max_workers=16) as pool:
        stored = dict(zip(unfired, pool.map(client.get, unfired), strict=True))
    outcomes: dict[str, Any] = {task_id: task.status for task_id, task in stored.items() if task is not None}
    outcomes.update(dict.fromkeys(dropped, TaskStatus.CANCELLED))
    return check(
        expected_from_due(due_ms, outcomes, grace_ms=grace_ms),
        observed,
        epsilon_ms=epsilon_ms,
        late_is_failure=late_is_failure,
    )


def _drift_of(
    due_ms: Mapping[str, int], observed: list[Fire], task_ids: Iterable[str], epsilon_ms: float
) -> dict[str, float | None]:
    """Drift percentiles of a subset of the plan, matched by the checker like the whole."""
    subset = {task_id: due_ms[task_id] for task_id in task_ids}
    expected = expected_from_due(subset)
    keys = {e.key for e in expected}
    return check(expected, [f for f in observed if f.key in keys], epsilon_ms=epsilon_ms).drift


def verdict_summary(verdict: Verdict) -> dict[str, Any]:
    """The verdict's figures as a JSON-ready dict (counts, the failing figures by name, the printable block)."""
    return {
        "ok": verdict.ok,
        "epsilon_ms": verdict.epsilon_ms,
        "expected": verdict.expected,
        "fires": verdict.fires,
        "matched": len(verdict.matched),
        "lost": len(verdict.lost),
        "explicitly_missed": len(verdict.explicitly_missed),
        "failed": len(verdict.failed),
        "cancelled": len(verdict.cancelled),
        "extra": len(verdict.extra),
        "unexplained_extras": len(verdict.unexplained),
        "unknown_keys": len(verdict.unknown),
        "fired_cancelled": len(verdict.fired_cancelled),
        "late": len(verdict.late),
        "early": len(verdict.early),
        "past_grace": len(verdict.past_grace),
        "problems": verdict.problems(),
        "text": verdict.format("checker"),
    }


def build_report(
    client: Client, plan: DemoPlan, fires: list[dict[str, Any]], epsilon_ms: float = EPSILON_MS
) -> dict[str, Any]:
    """The demo's report, every figure from the checker's verdict on the plan, the fire log and the table.

    ``fired`` counts planned tasks that fired, ``duplicates`` the fires beyond the first of a planned task,
    ``missed`` / ``failed`` the unfired tasks the table records so, ``lost`` the unfired ones without an
    explicit outcome; ``checker`` holds the whole verdict (:func:`verdict_summary`), whose ``ok`` decides the
    exit status of ``punctual demo``.
    """
    grace = client.settings.default_misfire_grace_ms
    verdict = check_fire_log(client, plan.due_ms, fires, epsilon_ms=epsilon_ms, grace_ms=grace)
    observed = fires_from_fire_log(fires)
    occurrences = plan.occurrence_ids
    others = plan.burst_ids | plan.webhook_ids | occurrences
    steady_ids = [task_id for task_id in plan.due_ms if task_id not in others]
    drift = verdict.drift
    return {
        "run_id": plan.run_id,
        "via": "table" if plan.tenant is None else f"api (tenant {plan.tenant})",
        "scheduled": len(plan.due_ms),
        "fired": len(verdict.matched),
        "missed": len(verdict.explicitly_missed),
        "failed": len(verdict.failed),
        "duplicates": len(verdict.extra) - len(verdict.unknown),
        "lost": len(verdict.lost),
        "drift_ms": {k: drift[k] for k in ("p50", "p90", "p99", "max")},
        "steady_drift_ms": _drift_of(plan.due_ms, observed, steady_ids, epsilon_ms),
        "burst_drift_ms": _drift_of(plan.due_ms, observed, plan.burst_ids, epsilon_ms),
        "webhook_drift_ms": _drift_of(plan.due_ms, observed, plan.webhook_ids, epsilon_ms),
        "recurring_drift_ms": _drift_of(plan.due_ms, observed, occurrences, epsilon_ms),
        "recurring": [f"{schedule_id}: rate({rate} milliseconds)" for schedule_id, rate in plan.recurring],
        "checker": verdict_summary(verdict),
    }


def format_report(report: dict[str, Any]) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:8.3f}"

    lines = [
        f"Punctual demo {report['run_id']} (scheduled through the {report.get('via', 'table')})",
        f"  scheduled {report['scheduled']}   fired {report['fired']}   missed {report['missed']}   "
        f"failed {report['failed']}   duplicates {report['duplicates']}   lost {report['lost']}",
        "",
        "  drift (ms, fired_at - due_at)                      count      p50      p90      p99      max",
    ]
    rows = [
        ("all", None),
        ("spread (log: at action start)", "steady_drift_ms"),
        ("burst (log: at action start)", "burst_drift_ms"),
    ]
    if report.get("recurring_drift_ms", {}).get("count"):
        rows.append((f"recurring ({len(report['recurring'])} schedules, sub-second rates)", "recurring_drift_ms"))
    if report.get("webhook_drift_ms", {}).get("count"):
        rows.append(("webhooks (arrival at the loopback receiver)", "webhook_drift_ms"))
    for label, key in rows:
        stats = report[key] if key else {**report["drift_ms"], "count": report["fired"]}
        lines.append(
            f"  {label:<50} {stats['count']:>6} {ms(stats['p50'])} {ms(stats['p90'])} "
            f"{ms(stats['p99'])} {ms(stats['max'])}"
        )
    if "checker" in report:
        lines += ["", *("  " + line for line in report["checker"]["text"].splitlines())]
    return "\n".join(lines)
