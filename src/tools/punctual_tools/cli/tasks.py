"""The task verbs: ``schedule`` (a task, or a recurring schedule), ``schedule-many``, ``get``, ``cancel``,
``run-now`` and ``list``."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from punctual.domain.model import Unreadable
from punctual.errors import InvalidRequestError, InvalidScheduleError, InvalidTaskError, PunctualError
from punctual_tools.cli.common import client_of, report_unreadable, threads
from punctual_tools.progress import ProgressLine

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")


def parse_when(args: argparse.Namespace) -> datetime:
    if args.at:
        try:
            return datetime.fromisoformat(args.at)
        except ValueError as exc:
            raise PunctualError(
                f"invalid --at {args.at!r}: use ISO-8601 with a timezone, e.g. 2026-11-22T09:00:00Z"
            ) from exc
    match = _DURATION.match(args.in_ or "")
    if not match:
        raise PunctualError("give --at ISO-8601 or --in DURATION (e.g. 1500ms, 30s, 5m, 2h)")
    value, unit = float(match.group(1)), match.group(2)
    seconds = value * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    try:
        return datetime.now(UTC) + timedelta(seconds=seconds)
    except OverflowError as exc:
        raise InvalidTaskError("due_at", f"--in {args.in_} is beyond any representable time") from exc


def cmd_schedule(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload) if args.payload is not None else None
    except ValueError as exc:
        raise PunctualError(f"invalid --payload: not JSON ({exc})") from exc
    if args.cron or args.rate or args.once_at:
        schedule = client_of(args).create_schedule(
            args.id or f"s-{uuid.uuid4().hex[:12]}",
            expression_of_args(args),
            action_of_args(args),
            payload,
            timezone=args.tz,
            start_at=instant(args.start, "--start"),
            end_at=instant(args.end, "--end"),
            max_occurrences=args.max,
            downtime_policy=args.downtime,
        )
        print(schedule.model_dump_json(indent=2))
        return 0
    if args.tz != "UTC" or args.start or args.end or args.max is not None:
        raise InvalidRequestError("expression", "--tz, --start, --end and --max go with --cron, --rate or --once-at")
    task = client_of(args).schedule(parse_when(args), action_of_args(args), payload, task_id=args.id)
    print(task.model_dump_json(indent=2))
    return 0


def expression_of_args(args: argparse.Namespace) -> str:
    """The schedule expression ``--cron``, ``--rate`` or ``--once-at`` gives (wrapped as ``cron(...)`` etc.)."""
    if args.once_at:
        return f"at({args.once_at})"
    kind, text = ("cron", args.cron.strip()) if args.cron else ("rate", args.rate.strip())
    return text if text.lower().startswith(kind + "(") else f"{kind}({text})"


def instant(text: str | None, flag: str) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidScheduleError(flag, f"not an ISO-8601 instant ({exc})") from exc
    if moment.tzinfo is None:
        raise InvalidScheduleError(flag, "give a timezone (e.g. 2026-12-01T09:00:00+01:00)")
    return moment


def pairs(values: list[str] | None, separator: str, flag: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for value in values or []:
        name, sep, rest = value.partition(separator)
        if not sep or not name.strip():
            raise InvalidRequestError(flag, f"{value!r}: give NAME{separator}VALUE")
        pairs[name.strip()] = rest.strip()
    return pairs


def action_of_args(args: argparse.Namespace) -> dict[str, Any]:
    """The action ``punctual schedule``'s flags describe (the model validates it): ``--http`` with its headers,
    secret headers and signing secret; ``--lambda``, ``--sqs``, ``--sns``, ``--eventbridge``; else ``--log``."""
    group = {"message_group_id": args.group_id} if args.group_id else {}
    if args.http:
        action: dict[str, Any] = {
            "kind": "http",
            "url": args.http,
            "headers": pairs(args.header, ":", "--header"),
            "secret_headers": pairs(args.secret_header, "=", "--secret-header"),
        }
        if args.sign_secret:
            action["signing_secret"] = args.sign_secret
        if args.timeout is not None:
            action["timeout_s"] = args.timeout
        if args.no_retry:
            action["retry_transient"] = False
        return action
    if args.lambda_:
        return {"kind": "lambda", "function_arn": args.lambda_}
    if args.sqs:
        return {"kind": "sqs", "queue_arn": args.sqs, **group}
    if args.sns:
        return {"kind": "sns", "topic_arn": args.sns, **group}
    if args.eventbridge:
        extra = {k: v for k, v in (("source", args.source), ("detail_type", args.detail_type)) if v}
        return {"kind": "eventbridge", "event_bus_arn": args.eventbridge, **extra}
    return {"kind": "log", "message": args.log}


def read_task_lines(path: str) -> list[dict[str, Any]]:
    """Tasks from a JSON-lines file (``-``: standard input), one object a line, in ``Client.schedule_many``'s
    terms with JSON values: ``due_at`` (ISO-8601 with a timezone), ``action`` (an object with its ``kind``),
    ``payload``, ``task_id``, ``misfire_grace`` (ms), ``misfire_policy``, ``retry``. A line that is not a JSON
    object is an error naming its line number; a bad field is reported per task by ``schedule_many``."""
    handle = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115 - closed below
    specs: list[dict[str, Any]] = []
    try:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                spec = json.loads(line)
            except ValueError as exc:
                raise PunctualError(f"{path}:{number}: not JSON ({exc})") from exc
            if not isinstance(spec, dict):
                raise PunctualError(f"{path}:{number}: each line must be a JSON object")
            if isinstance(spec.get("due_at"), str):
                try:
                    spec["due_at"] = datetime.fromisoformat(spec["due_at"])
                except ValueError as exc:
                    raise PunctualError(f"{path}:{number}: invalid due_at ({exc})") from exc
            specs.append(spec)
    finally:
        if handle is not sys.stdin:
            handle.close()
    return specs


def cmd_schedule_many(args: argparse.Namespace) -> int:
    """Schedule every task of a JSON-lines file at once, with a progress line; exit 1 if any was refused."""
    specs = read_task_lines(args.file)
    progress = ProgressLine(None if args.quiet else sys.stderr)
    started = time.monotonic()

    def show(done: int, total: int) -> None:
        rate = done / max(time.monotonic() - started, 1e-6)
        progress.show(f"scheduling: {done}/{total} ({rate:,.0f}/s)")

    results = client_of(args).schedule_many(specs, threads=args.threads, on_progress=show)
    counts = {
        outcome: sum(1 for r in results if r.outcome == outcome)
        for outcome in ("created", "exists", "invalid", "conflict", "error")
    }
    progress.end(
        f"scheduled {len(results)} in {time.monotonic() - started:.1f} s: "
        + ", ".join(f"{n} {outcome}" for outcome, n in counts.items() if n)
    )
    for result in [r for r in results if not r.ok][: args.show_errors]:
        print(
            f"task {result.index + 1} ({result.task_id or 'no id'}): {result.outcome}: {result.error}", file=sys.stderr
        )
    if args.json:
        print(json.dumps({"total": len(results), **counts}))
    return 0 if all(r.ok for r in results) else 1


def cmd_get(args: argparse.Namespace) -> int:
    task = client_of(args).get(args.task_id)
    if task is None:
        print(f"no task {args.task_id!r}", file=sys.stderr)
        return 1
    print(task.model_dump_json(indent=2))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    print(client_of(args).cancel(args.task_id).model_dump_json(indent=2))
    return 0


def cmd_run_now(args: argparse.Namespace) -> int:
    print(client_of(args).run_now(args.task_id).model_dump_json(indent=2))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    unreadable = Unreadable()
    for task in client_of(args).list(status=args.status, limit=args.limit, unreadable=unreadable):
        drift = "" if task.drift_ms is None else f"  drift {task.drift_ms:.3f} ms"
        print(f"{task.task_id}  {task.due_at.isoformat(timespec='milliseconds')}  {task.status}{drift}")
    report_unreadable(unreadable, "tasks")
    return 0


def add_commands(sub: Any) -> None:
    """Add ``schedule``, ``schedule-many``, ``get``, ``cancel`` and ``run-now`` to ``sub``."""
    sched = sub.add_parser("schedule", help="schedule one task, or a recurring schedule (--cron, --rate)")
    when = sched.add_mutually_exclusive_group(required=True)
    when.add_argument("--at", help="ISO-8601 instant with a timezone")
    when.add_argument("--in", dest="in_", help="from now: 1500ms, 30s, 5m, 2h")
    when.add_argument(
        "--cron",
        metavar="EXPR",
        help="recurring: EventBridge's six fields ('0 9 ? * MON-FRI *') or "
        "the common five ('0 9 * * 1-5'), read in --tz",
    )
    when.add_argument("--rate", metavar="N UNIT", help="recurring: every N milliseconds/seconds/minutes/hours/days")
    when.add_argument(
        "--once-at", metavar="LOCAL", help="a schedule of one occurrence at a local time of --tz (yyyy-mm-ddThh:mm:ss)"
    )
    recurring = sched.add_argument_group("recurring schedule options (with --cron, --rate, --once-at)")
    recurring.add_argument("--tz", default="UTC", help="IANA time zone the expression is read in (default UTC)")
    recurring.add_argument("--start", metavar="ISO", help="no occurrence before this instant (a rate counts from it)")
    recurring.add_argument("--end", metavar="ISO", help="no occurrence after this instant")
    recurring.add_argument("--max", type=int, default=None, metavar="N", help="at most N occurrences")
    recurring.add_argument(
        "--downtime",
        choices=("skip", "fire_latest"),
        default="skip",
        help="occurrences missed while nothing ran: skip them, or fire the latest once",
    )
    what = sched.add_mutually_exclusive_group()
    what.add_argument(
        "--http", metavar="URL", help="POST the payload to this URL (https; see PUNCTUAL_ALLOWED_TARGETS)"
    )
    what.add_argument("--lambda", dest="lambda_", metavar="FUNCTION_ARN", help="invoke this Lambda function (async)")
    what.add_argument("--sqs", metavar="QUEUE_ARN", help="send the payload to this SQS queue")
    what.add_argument("--sns", metavar="TOPIC_ARN", help="publish the payload to this SNS topic")
    what.add_argument("--eventbridge", metavar="BUS_ARN", help="put the payload on this EventBridge bus")
    what.add_argument("--log", default="", metavar="MESSAGE", help="a log action (the default)")
    http = sched.add_argument_group("http options")
    http.add_argument("--header", action="append", metavar="NAME:VALUE", help="a header to send (repeatable)")
    http.add_argument(
        "--secret-header",
        action="append",
        metavar="NAME=REF",
        help="a header whose value is the secret REF names, resolved when it fires: "
        "env:PUNCTUAL_SECRET_X, file:NAME, ssm:/punctual/X, secretsmanager:punctual/X[#key] (repeatable)",
    )
    http.add_argument(
        "--sign-secret",
        metavar="REF",
        help="sign each fire (Standard Webhooks) with the secret(s) REF "
        "names (whsec_..., two separated by a space while rotating)",
    )
    http.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="each attempt's deadline")
    http.add_argument("--no-retry", action="store_true", help="do not try a transient failure again")
    aws_opts = sched.add_argument_group("AWS target options")
    aws_opts.add_argument("--group-id", help="FIFO queue / topic message group (default: the task id)")
    aws_opts.add_argument("--source", help="EventBridge source (default punctual)")
    aws_opts.add_argument("--detail-type", help="EventBridge detail type (default punctual.fire)")
    sched.add_argument("--payload", help="JSON payload")
    sched.add_argument("--id", help="task id, or schedule id with --cron / --rate (idempotent)")
    sched.set_defaults(func=cmd_schedule)
    many = sub.add_parser("schedule-many", help="schedule every task of a JSON-lines file (- for stdin) at once")
    many.add_argument("file", help="one JSON object a line: due_at, action, payload, task_id, ...")
    many.add_argument(
        "--threads",
        type=threads,
        default=16,
        help="conditional writes in flight (1-256); with --api, calls of up to 100 tasks each",
    )
    many.add_argument("--show-errors", type=int, default=20, metavar="N", help="print the first N refusals")
    many.add_argument("--json", action="store_true", help="print the counts as one JSON object")
    many.add_argument("--quiet", action="store_true", help="no progress line")
    many.set_defaults(func=cmd_schedule_many)
    for name, func in (("get", cmd_get), ("cancel", cmd_cancel), ("run-now", cmd_run_now)):
        p = sub.add_parser(name, help=f"{name} one task")
        p.add_argument("task_id")
        p.set_defaults(func=func)


def add_list(sub: Any) -> None:
    """Add ``list`` to the subcommands ``sub``."""
    lst = sub.add_parser("list", help="list tasks (items that cannot be read are left out, counted on stderr)")
    lst.add_argument("--status", default=None)
    lst.add_argument("--limit", type=int, default=50)
    lst.set_defaults(func=cmd_list)
