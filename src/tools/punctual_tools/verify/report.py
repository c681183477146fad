"""What a verify run found: the messages read back, judged by the checker, per group and in all.

Pure. A message's arrival is its ``SentTimestamp``, set by SQS (a clock the executors do not own), so its drift
``SentTimestamp - due`` includes the SendMessage call. :func:`judge` feeds the expected occurrences and the
messages to :func:`punctual_tools.checker.check` once for all and once per group; the verdict the command stands
on is :func:`every_task_once`: each expected occurrence arrived, and once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from punctual_tools.checker import Expected, Fire, Verdict, check
from punctual_tools.verify.plan import GROUPS

UNKNOWN_GROUP = "unknown"  # a message whose body names no group of the run (it fails the verdict as an extra)


@dataclass(frozen=True)
class Arrival:
    """One message read back: the fire's key, the group its payload names, and when SQS took it (epoch ms)."""

    key: str
    group: str
    sent_ms: float
    message_id: str


def arrival_of(message: Mapping[str, Any], run_id: str) -> Arrival:
    """An SQS message (ReceiveMessage's, with ``Attributes.SentTimestamp``) as an :class:`Arrival`. A body that is
    not a fire of this run keeps the key ``<unreadable>`` or the group ``unknown``."""
    sent = float(message.get("Attributes", {}).get("SentTimestamp", "nan"))
    try:
        body = json.loads(message.get("Body", ""))
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return Arrival("<unreadable>", UNKNOWN_GROUP, sent, str(message.get("MessageId", "")))
    payload = body.get("payload")
    ours = isinstance(payload, dict) and payload.get("verify") == run_id and payload.get("group") in GROUPS
    group = str(payload["group"]) if ours and isinstance(payload, dict) else UNKNOWN_GROUP
    return Arrival(str(body.get("idempotency_key") or "<no key>"), group, sent, str(message.get("MessageId", "")))


def distinct(arrivals: Iterable[Arrival]) -> list[Arrival]:
    """Each message once: SQS may deliver a message again (a receive whose delete came late), under the same
    MessageId; that is a second delivery of one fire, not a second fire."""
    seen: dict[str, Arrival] = {}
    for arrival in arrivals:
        seen.setdefault(arrival.message_id or f"#{len(seen)}", arrival)
    return list(seen.values())


@dataclass(frozen=True)
class GroupResult:
    """One group's figures: expected, arrived (distinct keys), missing, duplicates (extra messages), drift (ms)."""

    group: str
    verdict: Verdict

    @property
    def expected(self) -> int:
        return self.verdict.expected

    @property
    def arrived(self) -> int:
        return len(self.verdict.matched)

    @property
    def missing(self) -> int:
        return self.verdict.expected - len(self.verdict.matched)

    @property
    def duplicates(self) -> int:
        return len(self.verdict.extra)

    @property
    def drift(self) -> dict[str, float | None]:
        return self.verdict.drift


@dataclass(frozen=True)
class RunResult:
    """The checker's verdict over every occurrence, and each group's."""

    overall: Verdict
    groups: tuple[GroupResult, ...]

    @property
    def every_task_once(self) -> bool:
        return every_task_once(self.overall)


def every_task_once(verdict: Verdict) -> bool:
    """Every expected occurrence arrived, exactly once, and nothing else did: the checker's verdict holds and it
    matched all of them with no extra (an explicit MISSED or FAILED is an outcome, not an arrival)."""
    return verdict.ok and len(verdict.matched) == verdict.expected and not verdict.extra


def judge(expected: Mapping[str, Sequence[Expected]], arrivals: Iterable[Arrival], epsilon_ms: float) -> RunResult:
    """Judge ``arrivals`` against the ``expected`` occurrences of each group (group -> occurrences).

    A message counts under the group its key was expected in (a message of no expected key, under the group its
    payload names). ``epsilon_ms`` is the checker's tolerance: an arrival more than this before its due instant
    fails the verdict (the executors' clock and SQS's disagree by more), a later one is reported late.
    """
    group_of = {occurrence.key: group for group, occurrences in expected.items() for occurrence in occurrences}
    fires: dict[str, list[Fire]] = {}
    for arrival in distinct(arrivals):
        group = group_of.get(arrival.key, arrival.group)
        fires.setdefault(group, []).append(Fire(arrival.key, arrival.sent_ms))
    everything = [occurrence for occurrences in expected.values() for occurrence in occurrences]
    overall = check(everything, [fire for group_fires in fires.values() for fire in group_fires], epsilon_ms)
    names = [*expected, *sorted(set(fires) - set(expected))]
    groups = tuple(GroupResult(name, check(expected.get(name, ()), fires.get(name, []), epsilon_ms)) for name in names)
    return RunResult(overall, groups)


def _ms(value: float | None) -> str:
    return f"{'-':>9}" if value is None else f"{value:9.1f}"


def format_groups(result: RunResult) -> list[str]:
    """The per-group table: counts, then arrival drift p50 / p99 / max in ms."""
    lines = [
        "arrival drift = SentTimestamp - due (ms), by group",
        f"  {'group':<12} {'expected':>8} {'arrived':>8} {'missing':>8} {'dupes':>6} {'p50':>9} {'p99':>9} {'max':>9}",
    ]
    rows = [*((g.group, g.verdict) for g in result.groups), ("all", result.overall)]
    for name, verdict in rows:
        drift = verdict.drift
        lines.append(
            f"  {name:<12} {verdict.expected:>8} {len(verdict.matched):>8} "
            f"{verdict.expected - len(verdict.matched):>8} {len(verdict.extra):>6} "
            f"{_ms(drift.get('p50'))} {_ms(drift.get('p99'))} {_ms(drift.get('max'))}"
        )
    return lines


def verdict_line(result: RunResult) -> str:
    """``verdict: every task once``, or what broke it."""
    if result.every_task_once:
        return "verdict: every task once"
    v = result.overall
    found = [
        (len(v.lost), "never arrived"),
        (len(v.explicitly_missed), "MISSED"),
        (len(v.failed), "FAILED"),
        (len(v.cancelled), "CANCELLED"),
        (len(v.extra), "extra messages"),
        (len(v.early), "early beyond ε"),
    ]
    return "verdict: NOT every task once: " + ", ".join(f"{n} {what}" for n, what in found if n)
