"""The ``schedules`` verb: list recurring schedules, show, pause, resume or delete one, list its occurrences."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from punctual.domain.keys import from_ms
from punctual.domain.model import Unreadable
from punctual.errors import InvalidRequestError
from punctual_tools.cli.common import client_of, report_unreadable


def cmd_schedules(args: argparse.Namespace) -> int:
    """List recurring schedules, or show, pause, resume, delete one, or list its occurrences."""
    client = client_of(args)
    unreadable = Unreadable()
    if args.verb == "list":
        for schedule in client.list_schedules(unreadable=unreadable):
            nxt = (
                "-"
                if schedule.next_due_ms is None
                else from_ms(schedule.next_due_ms).isoformat(timespec="milliseconds")
            )
            print(
                f"{schedule.schedule_id}  {schedule.state}  {schedule.expression}  {schedule.timezone}  "
                f"next {nxt}  made {schedule.created_count}  skipped {schedule.skipped_count}"
            )
        report_unreadable(unreadable, "schedules")
        return 0
    if not args.schedule_id:
        raise InvalidRequestError("schedule_id", f"punctual schedules {args.verb} needs one")
    if args.verb == "history":
        for task in client.schedule_history(args.schedule_id, limit=args.limit, unreadable=unreadable):
            drift = "" if task.drift_ms is None else f"  drift {task.drift_ms:.3f} ms"
            print(f"{task.task_id}  {task.due_at.isoformat(timespec='milliseconds')}  {task.status}{drift}")
        report_unreadable(unreadable, "occurrences")
        return 0
    verbs: dict[str, Callable[[str], Any]] = {
        "show": client.get_schedule,
        "pause": client.pause_schedule,
        "resume": client.resume_schedule,
        "delete": client.delete_schedule,
    }
    schedule = verbs[args.verb](args.schedule_id)
    if schedule is None:
        print(f"no schedule {args.schedule_id!r}", file=sys.stderr)
        return 1
    print(schedule.model_dump_json(indent=2))
    return 0


def add_commands(sub: Any) -> None:
    """Add ``schedules`` to the subcommands ``sub``."""
    schedules = sub.add_parser(
        "schedules",
        help="recurring schedules: list, show, pause, resume, delete, history (items that cannot be read are left "
        "out, counted on stderr)",
    )
    schedules.add_argument(
        "verb", nargs="?", default="list", choices=("list", "show", "pause", "resume", "delete", "history")
    )
    schedules.add_argument("schedule_id", nargs="?")
    schedules.add_argument("--limit", type=int, default=None, help="history: the last N occurrences")
    schedules.set_defaults(func=cmd_schedules)
