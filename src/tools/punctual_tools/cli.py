"""The ``punctual`` command: run the local stack, run the demo, and schedule or inspect tasks.

punctual up [--poll-interval 60] [--demo]      DynamoDB Local + poller + executors, until Ctrl-C
            [--profile lambda|local]           executors as Lambda runs them (default), or on whole cores
            [--tenant NAME ...] [--no-api]     the REST API also serves these tenants, a token each (or no API)
punctual status [--wait SECONDS]               the running local stack's state, once it is ready
punctual demo --tasks N --over S --burst B     schedule, watch them fire, print a drift report
punctual schedule --in 30s --log "hello"       one task (or --at ISO-8601, --http URL, --lambda / --sqs / --sns /
                                               --eventbridge ARN, --payload JSON)
punctual schedule --cron "0 9 ? * MON-FRI *" --tz Europe/Paris --log report   a recurring schedule (or --rate
                                               "500 milliseconds", --once-at LOCAL; --start, --end, --max)
punctual schedules [list | show | pause | resume | delete | history] [ID]
punctual get ID | punctual cancel ID | punctual run-now ID | punctual list [--status S]
                                               (each of these, and schedule: --api goes through the REST API,
                                               as the local stack's tenant --tenant, default local)
punctual redrive --all | ID ...                FAILED tasks back to PENDING; their dead letters removed
punctual backfill-tenant-shards [--dry-run]    key tenant tasks written before the sharded active count (a Scan)
punctual drift [--fire-log F | --table] [--out DIR]   drift pictures: histogram, timeline, CDF (PNG)
punctual verify [--stack NAME] [--quick]       a mix scheduled to an SQS queue of its own and read back: drift by
                                               group, the checker's verdict, the cost (CloudWatch); cleans up
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from punctual.config.settings import Settings
from punctual.domain.keys import from_ms
from punctual.domain.model import Unreadable
from punctual.errors import InvalidRequestError, InvalidScheduleError, InvalidTaskError, PunctualError
from punctual.scheduling.redrive import RedriveReport, Selection, SkipReason, redrive_tasks
from punctual_tools.progress import CLEAR_LINE, ProgressLine

if TYPE_CHECKING:
    from punctual.stores.dynamodb.backfill import BackfillCounts

log = logging.getLogger("punctual")


_NOISY = ("botocore", "boto3", "urllib3", "punctual.fire", "punctual.polling.poller")


def _setup_logging(verbose: bool) -> Callable[[], None]:
    """The command's logging; returns what puts the previous set-up back (main() run in-process, by tests)."""
    root = logging.getLogger()
    before = (root.level, list(root.handlers), {name: logging.getLogger(name).level for name in _NOISY})
    # On a terminal each log line first clears the line, so that it never lands on the end of a progress line.
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        stream=sys.stderr,
        format=(CLEAR_LINE if sys.stderr.isatty() else "") + "%(asctime)s %(levelname).1s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for noisy in _NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)

    def restore() -> None:
        root.setLevel(before[0])
        root.handlers[:] = before[1]
        for name, level in before[2].items():
            logging.getLogger(name).setLevel(level)

    return restore


def _non_negative_ms(text: str) -> float:
    """An argparse type: a finite number of milliseconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of milliseconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of milliseconds, 0 or more: {text!r}")
    return value


def _threads(text: str) -> int:
    """A thread count from the command line: a whole number from 1 to 256 (argparse reports the error)."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from exc
    if not 1 <= value <= 256:
        raise argparse.ArgumentTypeError(f"must be from 1 to 256, not {value}")
    return value


def _count(text: str) -> int:
    """A count from the command line: a whole number, 0 or more (argparse reports the error)."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from exc
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _tenant(text: str) -> str:
    """A tenant's name from the command line (argparse reports a bad one)."""
    from punctual.domain.tenancy import is_tenant

    if not is_tenant(text):
        raise argparse.ArgumentTypeError(f"not a tenant name: {text!r} (lower-case letters, digits and '-')")
    return text


def _home(args: argparse.Namespace) -> Path:
    from punctual_tools.local.dynamodb_local import find_project_root

    return Path(args.home) if args.home else find_project_root() / ".punctual"


def _stack_config(args: argparse.Namespace, poll_interval_s: float, *, demo_webhooks: bool = False) -> Any:
    """The local stack's configuration; with ``demo_webhooks``, its executors (and the demo's client) may also
    reach the demo's loopback receiver: ``127.0.0.1:<receiver port>`` is added to ``PUNCTUAL_ALLOWED_TARGETS``
    (the tenants' own targets hold it already)."""
    from punctual_tools.demo import RECEIVER_HOST, loopback_allowed
    from punctual_tools.local.stack import StackConfig
    from punctual_tools.settings import LocalSettings

    overrides = {
        "shard_count": args.shards,
        "table_name": args.table,
        "lead_ms": args.lead_ms,
        "profile": getattr(args, "profile", None),
    }
    if demo_webhooks:
        local = LocalSettings.from_env()
        if not loopback_allowed(local.allowed_targets, local.receiver_port):
            receiver = f"{RECEIVER_HOST}:{local.receiver_port}"
            overrides["allowed_targets"] = ",".join(filter(None, [local.allowed_targets, receiver]))
    # up serves the tenants its --tenant names; demo, when it starts the stack, the one it acts as
    tenants = [*(getattr(args, "tenants", None) or ()), *filter(None, [getattr(args, "tenant", None)])]
    return StackConfig(
        home=_home(args),
        port=args.port,
        in_memory=args.in_memory,
        poll_interval_s=poll_interval_s,
        settings_overrides={k: v for k, v in overrides.items() if v is not None},
        api=getattr(args, "serve_api", True),
        api_port=getattr(args, "api_port", 0),
        **({"prewarm": args.prewarm} if getattr(args, "prewarm", None) is not None else {}),
        tenants=tuple(dict.fromkeys(tenants)),
    )


def _print_poll(report: Any) -> None:
    name = f"poll (group {report.group})" if report.group else "poll"
    if report.candidates or report.dispatched or report.undecodable:
        log.info(
            "%s: %d due by %s dispatched in %d batch(es) (%d recovered, %d left for the next tick, %d undecodable)",
            name,
            report.dispatched,
            datetime.fromtimestamp(report.window_end_ms / 1000, UTC).strftime("%H:%M:%S"),
            report.batches,
            report.recovered,
            report.undispatched,
            report.undecodable,
        )
    else:
        log.info(
            "%s: nothing due by %s", name, datetime.fromtimestamp(report.window_end_ms / 1000, UTC).strftime("%H:%M:%S")
        )


def cmd_up(args: argparse.Namespace) -> int:
    from punctual.runtime.client import Client
    from punctual_tools.demo import format_report, run_demo
    from punctual_tools.local.stack import LocalStack

    if not args.serve_api and (args.api or args.tenants):
        raise PunctualError("--no-api serves no REST API: --api and --tenant need it")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    webhooks = args.demo_webhooks if args.demo else 0
    stack = LocalStack(_stack_config(args, args.poll_interval, demo_webhooks=webhooks > 0), on_poll=_print_poll)
    log.info("starting DynamoDB Local and the runtime (data in %s)", stack.config.home)
    stack.start()
    assert stack.settings is not None
    log.info(
        "Punctual is up: DynamoDB Local at %s, table %s, poll every %g s (a task due within %g s of its writing "
        "goes by the fast path)%s. Ctrl-C stops.",
        stack.settings.endpoint_url,
        stack.settings.table_name,
        args.poll_interval,
        (stack.settings.poll_interval_ms + stack.settings.fast_path_margin_ms) / 1000,
        "" if stack.api else ", no REST API",
    )
    for line in stack.describe_limits():
        log.info("%s", line)
    try:
        if args.demo:

            def demo() -> None:
                report = run_demo(
                    Client(stack.settings),
                    stack.fire_log,
                    args.demo_tasks,
                    args.demo_over,
                    args.demo_burst,
                    stack.settings.poll_interval_ms,  # type: ignore[union-attr]
                    webhooks=webhooks,
                    recurring_ms=args.demo_recurring,
                    receiver_port=stack.settings.receiver_port,  # type: ignore[union-attr]
                    **_demo_api(args, stack),
                )
                print(format_report(report), flush=True)
                log.info("demo done; the stack keeps running until Ctrl-C")

            threading.Thread(target=demo, daemon=True, name="demo").start()
        deadline = time.monotonic() + args.duration if args.duration else None
        while not stop.wait(0.5):
            if deadline is not None and time.monotonic() > deadline:
                break
    finally:
        log.info("stopping: executors hand back unfired tasks, then DynamoDB Local stops")
        stack.stop()
        log.info("stopped")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Print the running local stack's state file once the stack is ready (waiting up to ``--wait`` seconds)."""
    from punctual_tools.local.stack import wait_ready

    state = wait_ready(_home(args), args.wait)
    if state is None:
        waited = f" within {args.wait:g} s" if args.wait else ""
        print(f"no local stack is ready{waited} with its home at {_home(args)}", file=sys.stderr)
        return 1
    print(json.dumps(state, indent=2))
    return 0


def _api_tenant(args: argparse.Namespace) -> str:
    """The local stack's tenant a command acts as through the REST API (``--tenant``, default ``local``)."""
    from punctual_tools.local.api_server import LOCAL_TENANT

    tenant = getattr(args, "tenant", None)
    if tenant is not None and not getattr(args, "api", False):
        raise PunctualError(f"--tenant {tenant} acts through the local stack's REST API: add --api")
    return tenant or LOCAL_TENANT


def _api_token(state: dict[str, Any], tenant: str) -> str:
    """The bearer token of ``tenant`` the running stack (its state file, ``state``) wrote."""
    from punctual_tools.local.api_server import LOCAL_TENANT

    files = state.get("api_token_files") or {}
    if tenant == LOCAL_TENANT and not files and state.get("api_token_file"):
        files = {LOCAL_TENANT: state["api_token_file"]}  # a stack that serves the tenant local only
    if tenant not in files:
        raise PunctualError(
            f"the running stack's REST API does not serve the tenant {tenant!r} (it serves "
            f"{', '.join(sorted(files)) or 'none'}): start it with punctual up --tenant {tenant}"
        )
    try:
        return Path(files[tenant]).read_text().strip()
    except OSError as exc:
        raise PunctualError(f"cannot read the tenant {tenant!r}'s API token at {files[tenant]}: {exc}") from exc


def _demo_api(args: argparse.Namespace, stack: Any) -> dict[str, Any]:
    """With ``--api``: the demo schedules through the stack's REST API, as the tenant ``--tenant`` (default
    ``local``; run_demo's arguments); else nothing."""
    tenant = _api_tenant(args)
    if not args.api:
        return {}
    from punctual.scheduling.api_client import ApiClient
    from punctual_tools.local.stack import read_state

    if stack is not None and stack.api is not None:
        url, token = stack.api.url, stack.api_token_path(tenant).read_text().strip()
    else:
        state = read_state(_home(args)) or {}
        if not state.get("api_url"):
            raise PunctualError("--api: the running stack serves no REST API")
        url, token = state["api_url"], _api_token(state, tenant)
    log.info("the demo schedules through the REST API at %s (tenant %r)", url, tenant)
    return {"api": ApiClient(url, token=token), "tenant": tenant}


def cmd_demo(args: argparse.Namespace) -> int:
    from punctual.runtime.client import Client
    from punctual_tools.demo import EPSILON_MS, format_report, loopback_allowed, run_demo
    from punctual_tools.local.stack import LocalStack, _alive, client_settings, read_state

    _api_tenant(args)  # a --tenant without --api is refused before anything starts
    state = read_state(_home(args))
    stack = None
    webhooks = args.webhooks
    if state and _alive(state.get("pid")):
        settings = Settings.from_env(**client_settings(state), allowed_targets=state.get("allowed_targets", ""))
        fire_log, interval = Path(state["fire_log"]), int(state["poll_interval_ms"])
        receiver_port = int(state.get("receiver_port") or 0)
        log.info("using the running stack at %s (poll every %g s)", state["endpoint_url"], interval / 1000)
        if webhooks and not args.api and not loopback_allowed(settings.allowed_targets, receiver_port or None):
            log.warning(
                "the running stack's executors may not reach the demo's loopback receiver (its "
                "PUNCTUAL_ALLOWED_TARGETS has no 127.0.0.1:%s): the demo schedules no webhooks",
                receiver_port,
            )
            webhooks = 0
    else:
        log.info("no running stack: starting one for this demo (poll every %g s)", args.poll_interval)
        stack = LocalStack(
            _stack_config(args, args.poll_interval, demo_webhooks=webhooks > 0),
            on_poll=_print_poll,
            on_batch=lambda result: None,
        ).start()
        assert stack.settings is not None
        settings, fire_log, interval = stack.settings, stack.fire_log, stack.settings.poll_interval_ms
        receiver_port = stack.settings.receiver_port
    try:
        report = run_demo(
            Client(settings),
            fire_log,
            args.tasks,
            args.over,
            args.burst,
            interval,
            out=None if args.quiet else sys.stderr,
            epsilon_ms=EPSILON_MS if args.epsilon_ms is None else args.epsilon_ms,
            webhooks=webhooks,
            recurring_ms=args.recurring,
            receiver_port=receiver_port,
            **_demo_api(args, stack),
        )
    finally:
        if stack is not None:
            stack.stop()
    print(json.dumps(report) if args.json else format_report(report), flush=True)
    return 0 if report["checker"]["ok"] else 1


DEMO_RATES = (250, 500, 1000)  # the demo's recurring schedules: rate(N milliseconds) each


def _rates(text: str) -> tuple[int, ...]:
    """``--recurring``: comma-separated rates in ms (each at least the shortest rate a schedule takes), or none."""
    from punctual.domain.recurrence import MIN_RATE_MS

    if text.strip().lower() in ("", "none", "0"):
        return ()
    try:
        rates = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated whole milliseconds, e.g. 250,500") from None
    if any(rate < MIN_RATE_MS for rate in rates):
        raise argparse.ArgumentTypeError(f"{text!r}: a rate is {MIN_RATE_MS} ms at least")
    return rates


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")


def _parse_when(args: argparse.Namespace) -> datetime:
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


def _settings(args: argparse.Namespace) -> Settings:
    """AWS (``PUNCTUAL_*``) with ``--aws``, else the running local stack's settings when there is one: its table,
    and how it polls (a task is flagged for the fast path by the stack's poll interval, not this process's)."""
    from punctual.stores.dlq import file_queue_url
    from punctual_tools.local.stack import client_settings, read_state

    state = read_state(_home(args))
    overrides: dict[str, Any] = {}
    if state and not args.aws:
        overrides = {
            **client_settings(state),
            "dead_letter_queue_url": state.get("dead_letter_queue_url") or file_queue_url(_home(args) / "dlq.jsonl"),
        }
    return Settings.from_env(**overrides)


def _client(args: argparse.Namespace) -> Any:
    """The client a command uses: the table directly, or the REST API with ``--api`` (or ``PUNCTUAL_API_URL``):
    with ``--aws`` (or a URL set) AWS's, SigV4-signed; else the running local stack's, with its token."""
    from punctual.runtime.client import Client

    settings = _settings(args)
    tenant = _api_tenant(args)
    if not getattr(args, "api", False) and not settings.api_url:
        return Client(settings)
    from punctual.scheduling.api_client import ApiClient
    from punctual_tools.local.stack import read_state

    if getattr(args, "tenant", None) is not None and (args.aws or settings.api_url):
        raise PunctualError(
            "--tenant picks a token of the local stack's; through PUNCTUAL_API_URL or --aws the "
            "tenant is the caller's (its IAM principal, or PUNCTUAL_API_TOKEN)"
        )
    if settings.api_url:
        return ApiClient.from_settings(settings)
    if args.aws:
        raise PunctualError("--api --aws needs the API's URL in PUNCTUAL_API_URL (the stack's ApiUrl output)")
    state = read_state(_home(args)) or {}
    if not state.get("api_url"):
        raise PunctualError("--api: no local stack serving the API is running (start one with punctual up)")
    return ApiClient(state["api_url"], token=_api_token(state, tenant))


def cmd_schedule(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload) if args.payload is not None else None
    except ValueError as exc:
        raise PunctualError(f"invalid --payload: not JSON ({exc})") from exc
    if args.cron or args.rate or args.once_at:
        schedule = _client(args).create_schedule(
            args.id or f"s-{uuid.uuid4().hex[:12]}",
            _expression_of_args(args),
            action_of_args(args),
            payload,
            timezone=args.tz,
            start_at=_instant(args.start, "--start"),
            end_at=_instant(args.end, "--end"),
            max_occurrences=args.max,
            downtime_policy=args.downtime,
        )
        print(schedule.model_dump_json(indent=2))
        return 0
    if args.tz != "UTC" or args.start or args.end or args.max is not None:
        raise InvalidRequestError("expression", "--tz, --start, --end and --max go with --cron, --rate or --once-at")
    task = _client(args).schedule(_parse_when(args), action_of_args(args), payload, task_id=args.id)
    print(task.model_dump_json(indent=2))
    return 0


def _expression_of_args(args: argparse.Namespace) -> str:
    """The schedule expression ``--cron``, ``--rate`` or ``--once-at`` gives (wrapped as ``cron(...)`` etc.)."""
    if args.once_at:
        return f"at({args.once_at})"
    kind, text = ("cron", args.cron.strip()) if args.cron else ("rate", args.rate.strip())
    return text if text.lower().startswith(kind + "(") else f"{kind}({text})"


def _instant(text: str | None, flag: str) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidScheduleError(flag, f"not an ISO-8601 instant ({exc})") from exc
    if moment.tzinfo is None:
        raise InvalidScheduleError(flag, "give a timezone (e.g. 2026-12-01T09:00:00+01:00)")
    return moment


def cmd_schedules(args: argparse.Namespace) -> int:
    """List recurring schedules, or show, pause, resume, delete one, or list its occurrences."""
    client = _client(args)
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


def _pairs(values: list[str] | None, separator: str, flag: str) -> dict[str, str]:
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
            "headers": _pairs(args.header, ":", "--header"),
            "secret_headers": _pairs(args.secret_header, "=", "--secret-header"),
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

    results = _client(args).schedule_many(specs, threads=args.threads, on_progress=show)
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
    task = _client(args).get(args.task_id)
    if task is None:
        print(f"no task {args.task_id!r}", file=sys.stderr)
        return 1
    print(task.model_dump_json(indent=2))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    print(_client(args).cancel(args.task_id).model_dump_json(indent=2))
    return 0


def cmd_run_now(args: argparse.Namespace) -> int:
    print(_client(args).run_now(args.task_id).model_dump_json(indent=2))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    unreadable = Unreadable()
    for task in _client(args).list(status=args.status, limit=args.limit, unreadable=unreadable):
        drift = "" if task.drift_ms is None else f"  drift {task.drift_ms:.3f} ms"
        print(f"{task.task_id}  {task.due_at.isoformat(timespec='milliseconds')}  {task.status}{drift}")
    report_unreadable(unreadable, "tasks")
    return 0


def report_unreadable(unreadable: Unreadable, what: str) -> None:
    """Say on stderr how many stored items a listing of ``what`` left out because they cannot be read (the log
    names each one's key); nothing when none was."""
    if not unreadable.count:
        return
    shown = unreadable.keys[:10] + (["..."] if len(unreadable.keys) > 10 else [])
    keys = f" ({', '.join(shown)})" if shown else ""
    print(
        f"punctual: {unreadable.count} stored item(s) left out of the {what} listed: they cannot be read{keys}",
        file=sys.stderr,
    )


def cmd_redrive(args: argparse.Namespace) -> int:
    """FAILED tasks back to PENDING (due now, attempts afresh), then their dead letters removed
    (:func:`punctual.scheduling.redrive.redrive_tasks`), and its report printed: a line per task, then the counts.

    The tasks are those named, or with ``--all`` every task with a dead letter and every FAILED task in the table
    (a task whose dead letter was never sent - the executor died after recording FAILED - is found there). A task
    that is not FAILED any more (already redriven) is left alone and said so; its stale dead letters are removed.
    A tenant's tasks past its ``active_tasks`` quota (the tenant map's) stay FAILED, said so too.
    """
    from punctual.config.tenant_source import tenant_map_source
    from punctual.domain.clock import SystemClock
    from punctual.domain.tenancy import split
    from punctual.scheduling.quotas import QuotaGuard, TenantAdmission
    from punctual.stores.dlq import build_dead_letter_queue
    from punctual.stores.dynamodb import build_stores

    if args.all == bool(args.task_ids):
        raise PunctualError("give --all or one or more task ids")
    settings = _settings(args)
    selection = Selection.everything() if args.all else Selection.of(args.task_ids)
    queue = build_dead_letter_queue(settings)
    tasks = build_stores(settings).client
    tenants = tenant_map_source(settings).tenant_map()
    admit = TenantAdmission(QuotaGuard(tasks), lambda task_id: tenants.policy_of(split(task_id)[0] or "").quotas)
    report = redrive_tasks(tasks, selection, int(SystemClock().wall_ms()), queue, admit)
    for line in redrive_lines(report):
        print(line)
    return 0


def redrive_lines(report: RedriveReport) -> list[str]:
    """What ``punctual redrive`` prints of a report: a line per task redriven or skipped (and why), then the counts."""
    lines = [f"{task_id}: redriven (FAILED -> PENDING, due now)" for task_id in report.redriven]
    for skipped in report.skipped:
        if skipped.reason is SkipReason.NOT_FOUND:
            why = "no such task"
        elif skipped.reason is SkipReason.NOT_FAILED:
            why = f"{skipped.status}, not FAILED"
        elif skipped.reason is SkipReason.OVER_QUOTA:
            why = "its tenant is at its active_tasks quota: still FAILED"
        else:
            why = f"lost the race: {skipped.status or 'gone'} now, changed by another caller"
        lines.append(f"{skipped.task_id}: {why}: nothing to do")
    removed = report.dead_letters_removed
    where = "no dead-letter queue configured" if removed is None else f"{removed} dead letter(s) removed"
    lines.append(f"redrive: {len(report.redriven)} task(s) redriven, {len(report.skipped)} unchanged; {where}")
    return lines


def cmd_backfill_tenant_shards(args: argparse.Namespace) -> int:
    """Set ``tenant_shard`` on the active tenant tasks written before the ``tenant_active_sharded`` index (a parallel
    Scan of the whole table: :func:`punctual.stores.dynamodb.backfill.backfill_tenant_shards`), with progress on
    stderr and a summary line; exit 1 if any request failed (run it again: it keys only what is left)."""
    from punctual.stores.dynamodb import build_stores
    from punctual.stores.dynamodb.backfill import backfill_tenant_shards

    settings = _settings(args)
    store = build_stores(settings.model_copy(update={"db_threads": max(settings.db_threads, args.segments)}))
    line = ProgressLine(sys.stderr)
    counts = backfill_tenant_shards(
        store.table,
        segments=args.segments,
        dry_run=args.dry_run,
        progress=lambda counts: line.show(backfill_line(counts, args.dry_run)),
    )
    line.end()
    print(f"backfill-tenant-shards: {backfill_line(counts, args.dry_run)}")
    return 1 if counts.errors else 0


def backfill_line(counts: BackfillCounts, dry_run: bool) -> str:
    """The counts of a backfill in one line."""
    done = f"{counts.found} to key (dry run: none written)" if dry_run else f"{counts.updated} keyed"
    return (
        f"{counts.scanned} item(s) scanned, {done}, {counts.skipped} skipped (ended or keyed meanwhile), "
        f"{counts.errors} error(s)"
    )


def cmd_drift(args: argparse.Namespace) -> int:
    """Drift pictures (histogram, timeline, CDF) from a fire log, or from the table's fired tasks."""
    from punctual_tools.drift import entries_from_tasks, read_fire_log, save_pictures, series_of

    if args.table:
        from punctual.domain.model import Outcome, status_after
        from punctual.stores.dynamodb import build_stores

        statuses = [status_after(o) for o in (Outcome.SUCCEEDED, Outcome.FAILED, Outcome.RETRY)]  # what a fire leaves
        tasks = build_stores(_settings(args)).client.list_tasks(statuses)
        entries = entries_from_tasks(t for t in tasks if t.task_id.startswith(args.prefix))
        source = f"table {_settings(args).table_name}"
    else:
        from punctual_tools.local.stack import read_state

        state = read_state(_home(args)) or {}
        path = Path(args.fire_log or state.get("fire_log") or _home(args) / "fires.jsonl")
        if not path.is_file():
            raise PunctualError(f"no fire log at {path}: give --fire-log PATH, or --table")
        entries = read_fire_log(path, args.prefix)
        source = str(path)
    series = series_of(args.name or (args.prefix.rstrip("-") or "drift"), entries)
    if not series.fires:
        which = f" for tasks starting with {args.prefix!r}" if args.prefix else ""
        raise PunctualError(f"no fires in {source}{which}")
    out = Path(args.out) if args.out else _home(args) / "drift"
    for path in save_pictures(series, out):
        print(path)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Schedule a mix to an SQS queue of its own, read it back, judge it, clean up (:mod:`punctual_tools.verify`)."""
    from punctual_tools.verify.command import run_command

    return run_command(args, _home(args))


def cmd_plan(args: argparse.Namespace) -> int:
    """Print the parameters, quotas, table capacity and monthly bill a sustained rate needs."""
    from punctual_tools.plan import make_plan
    from punctual_tools.plan.model import Levers
    from punctual_tools.plan.text import plan_lines

    levers = Levers(
        polls_per_minute=args.polls_per_minute,
        lead_s=None if args.lead_ms is None else args.lead_ms / 1000,
        capacity=args.capacity,
        utilization=args.utilization / 100,
        reserved=args.reserved,
        arch=args.arch,
        api_tasks_per_call=args.api_batch if args.api else 1,
        batch_size=args.batch_size,
    )
    try:
        plan = make_plan(args.rate, args.payload_kb, args.memory, "api" if args.api else "client", levers=levers)
    except ValueError as exc:
        print(f"punctual plan: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(plan.as_dict(), indent=2) if args.json else "\n".join(plan_lines(plan)))
    return 0


def _number(low: float, high: float, kind: type[float] | type[int] = float, above: bool = False) -> Any:
    """An argparse type: a finite number of ``kind`` in [low, high] (above ``low`` when ``above``)."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or value < low or value > high or (above and value <= low):
            bound = f"above {low:g}" if above else f"at least {low:g}"
            raise argparse.ArgumentTypeError(f"{text} is out of range: {bound} and at most {high:g}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="punctual", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--home", help="where the local stack keeps data, logs and state (default .punctual)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", required=True)

    def stack_options(p: argparse.ArgumentParser, poll_default: float) -> None:
        p.add_argument("--port", type=int, default=8765, help="DynamoDB Local port (0 picks a free one)")
        p.add_argument(
            "--poll-interval",
            type=float,
            default=poll_default,
            metavar="SECONDS",
            help="seconds between two polls of the due index (ticks aligned to the clock); a task written due "
            "sooner than this + 10 s goes by the stream fast path instead",
        )
        p.add_argument(
            "--lead-ms",
            type=int,
            default=None,
            metavar="MS",
            help="how far ahead of now a poll dispatches tasks, at least the poll interval + 10 s (default "
            "PUNCTUAL_LEAD_MS, or 90000; e.g. 20000 with --poll-interval 10)",
        )
        p.add_argument(
            "--shards",
            type=int,
            default=None,
            help="shards per minute bucket of the due index (default PUNCTUAL_SHARD_COUNT, or 4)",
        )
        p.add_argument(
            "--table", default=None, help="the tasks table's name (default PUNCTUAL_TABLE_NAME, or punctual-tasks)"
        )
        p.add_argument("--in-memory", action="store_true", help="keep DynamoDB Local's data in memory only")

    up = sub.add_parser(
        "up",
        help="run DynamoDB Local, the poller and the executors until Ctrl-C",
        description="Run the whole system on this machine until Ctrl-C (or --duration): DynamoDB Local, the poller "
        "every --poll-interval seconds, executors as Lambda runs them, the stream fast path and the REST API. A "
        "task written due sooner than the poll interval + 10 s (PUNCTUAL_FAST_PATH_MARGIN_MS) goes by the fast "
        "path: the table's stream dispatches it at once; one due later waits for the poll that finds it. "
        "<home>/stack.json is written once the stack is ready (punctual status --wait SECONDS waits for it).",
    )
    stack_options(up, 60.0)
    up.add_argument("--api-port", type=int, default=8766, help="the REST API's loopback port (0 picks a free one)")
    up.add_argument(
        "--profile",
        choices=("lambda", "local"),
        default=None,
        help="lambda (default, or PUNCTUAL_PROFILE): each executor as Lambda runs it, by template.yaml "
        "(its memory's CPU share, timeout, frozen while idle, retries, event age, concurrency), single writes "
        "and DynamoDB as far away as from Lambda (PUNCTUAL_STORE_LATENCY); "
        "local: whole cores and real-time firing, for a stack on a server of its own",
    )
    up.add_argument(
        "--tenant",
        dest="tenants",
        action="append",
        type=_tenant,
        metavar="NAME",
        help="the REST API also serves this tenant, with a token of its own in <home>/tokens/NAME "
        "(repeatable; the tenant local, token in <home>/api-token, is always served)",
    )
    up.add_argument(
        "--prewarm",
        type=_count,
        default=None,
        metavar="N",
        help="executor environments started, through their INIT, before the stack is ready "
        "(default 16; no more than the executor's concurrency)",
    )
    up.add_argument(
        "--no-api",
        dest="serve_api",
        action="store_false",
        help="serve no REST API (the CLI's commands without --api, and the client, write to the table)",
    )
    up.add_argument("--demo", action="store_true", help="also run a demo once the stack is up")
    up.add_argument("--demo-tasks", type=int, default=300, help="the demo's tasks, spread over --demo-over seconds")
    up.add_argument("--demo-over", type=float, default=20.0, metavar="SECONDS", help="the demo's span")
    up.add_argument("--demo-burst", type=int, default=200, help="besides them, this many due at one single instant")
    up.add_argument(
        "--demo-webhooks",
        type=int,
        default=100,
        help="of the demo's tasks, this many more POST to a loopback receiver (0: none)",
    )
    up.add_argument(
        "--demo-recurring",
        type=_rates,
        default=DEMO_RATES,
        metavar="MS,MS,...",
        help="beside the tasks, one recurring schedule per rate in ms over the same seconds "
        f"(default {','.join(map(str, DEMO_RATES))}; 'none': none)",
    )
    up.add_argument("--duration", type=float, default=None, help="stop by itself after this many seconds")
    up.add_argument("--api", action="store_true", help="the demo schedules through the REST API, not the table")
    up.set_defaults(func=cmd_up)

    status = sub.add_parser("status", help="print the running local stack's state (stack.json) once it is ready")
    status.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for a stack to be ready (exit 1 if none is by then)",
    )
    status.set_defaults(func=cmd_status)

    demo = sub.add_parser("demo", help="schedule tasks on the local stack and report their drift")
    stack_options(demo, 5.0)
    demo.add_argument("--tasks", type=int, default=300, help="tasks spread over --over seconds")
    demo.add_argument("--over", type=float, default=20.0, metavar="SECONDS")
    demo.add_argument("--burst", type=int, default=200, help="tasks due at one single instant")
    demo.add_argument(
        "--webhooks",
        type=int,
        default=100,
        help="webhooks spread over --over seconds to a loopback receiver the demo starts (0: none)",
    )
    demo.add_argument(
        "--recurring",
        type=_rates,
        default=DEMO_RATES,
        metavar="MS,MS,...",
        help="one recurring schedule per rate in ms over --over seconds "
        f"(default {','.join(map(str, DEMO_RATES))}; 'none': none)",
    )
    demo.add_argument(
        "--epsilon-ms",
        type=_non_negative_ms,
        default=None,
        metavar="MS",
        help="the checker's tolerance (default 10): a fire later than due + this is reported late, "
        "one earlier than due - this fails the verdict",
    )
    demo.add_argument("--api", action="store_true", help="schedule through the stack's REST API, not the table")
    demo.add_argument(
        "--tenant",
        type=_tenant,
        default=None,
        metavar="NAME",
        help="with --api: as this tenant (default local; a stack the demo starts serves it)",
    )
    demo.add_argument("--json", action="store_true", help="print one JSON object")
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    demo.set_defaults(func=cmd_demo)

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
        type=_threads,
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
    lst = sub.add_parser("list", help="list tasks (items that cannot be read are left out, counted on stderr)")
    lst.add_argument("--status", default=None)
    lst.add_argument("--limit", type=int, default=50)
    lst.set_defaults(func=cmd_list)
    redrive = sub.add_parser("redrive", help="put FAILED tasks back to PENDING and remove their dead letters")
    redrive.add_argument("--all", action="store_true", help="every dead-lettered task and every FAILED task")
    redrive.add_argument("task_ids", nargs="*", metavar="TASK_ID")
    redrive.set_defaults(func=cmd_redrive)
    backfill = sub.add_parser(
        "backfill-tenant-shards",
        help="after the upgrade to the sharded active-task count: key the active tenant tasks written before it "
        "(one Scan of the whole table, about table size / 4 KB / 2 read units; safe to run again, and while the "
        "stack runs)",
    )
    backfill.add_argument("--dry-run", action="store_true", help="count the tasks to key, write nothing")
    backfill.add_argument(
        "--segments",
        type=_number(1, 64, int),
        default=4,
        metavar="N",
        help="parallel Scan segments, 1 to 64",
    )
    backfill.set_defaults(func=cmd_backfill_tenant_shards)
    drift = sub.add_parser("drift", help="drift pictures (histogram, timeline, CDF as PNG) from a fire log or table")
    source = drift.add_mutually_exclusive_group()
    source.add_argument(
        "--fire-log",
        metavar="PATH",
        help="JSON lines with task_id, due_ms, fired_ms (default: the running stack's, else <home>/fires.jsonl)",
    )
    source.add_argument("--table", action="store_true", help="the fired tasks in the table (drift_ms) instead")
    drift.add_argument("--prefix", default="", help="only tasks whose id starts with this")
    drift.add_argument("--out", metavar="DIR", help="where the PNGs go (default <home>/drift)")
    drift.add_argument("--name", help="the pictures' title and file-name stem (default: the prefix, or 'drift')")
    drift.add_argument("--aws", action="store_true", help="with --table: AWS (PUNCTUAL_* settings)")
    drift.set_defaults(func=cmd_drift)
    verify = sub.add_parser(
        "verify", help="schedule a mix to an SQS queue of its own, read it back: drift, verdict, cost; clean up"
    )
    from punctual_tools.verify.options import add_arguments as verify_arguments

    verify_arguments(verify)
    verify.set_defaults(func=cmd_verify)
    plan = sub.add_parser(
        "plan",
        help="the parameter overrides, account quotas, table capacity and monthly bill for a rate of tasks "
        "(docs/scale.md)",
    )
    plan.add_argument(
        "--rate", required=True, type=_number(0, 1e9, above=True), metavar="R", help="tasks due a second, sustained"
    )
    plan.add_argument(
        "--payload-kb", type=_number(0, 400), default=0.2, metavar="K", help="a task's payload in KB (default 0.2)"
    )
    plan.add_argument(
        "--memory",
        type=_number(128, 10_240, int),
        default=None,
        metavar="MB",
        help="the executor's memory, 128 to 10240 (default the template's ExecutorMemorySize)",
    )
    plan.add_argument("--api", action="store_true", help="tasks made through the REST API (its tenant indexes)")
    plan.add_argument(
        "--api-batch",
        type=_number(1, 100, int),
        default=1,
        metavar="N",
        help="with --api: tasks a call carries (up to 100 through POST /v1/tasks:batch; default 1)",
    )
    plan.add_argument(
        "--polls-per-minute",
        type=_number(1, 6, int),
        default=1,
        metavar="K",
        help="polls within each scheduled minute, 1 to 6 (the template's PollsPerMinute; default 1)",
    )
    plan.add_argument(
        "--lead-ms",
        type=_number(20_000, 180_000, int),
        default=None,
        metavar="MS",
        help="how far ahead the poller dispatches (LeadMs; default the template's); at least the poll interval "
        "plus the fast path's margin",
    )
    plan.add_argument(
        "--capacity",
        choices=("on-demand", "provisioned"),
        default="on-demand",
        help="the table's capacity mode (TableBillingMode; provisioned: with auto scaling)",
    )
    plan.add_argument(
        "--utilization",
        type=_number(20, 90),
        default=70,
        metavar="PCT",
        help="provisioned: auto scaling's target utilization, 20 to 90 %% (default 70)",
    )
    plan.add_argument(
        "--reserved",
        choices=("none", "1y", "3y"),
        default="none",
        help="provisioned: priced as DynamoDB reserved capacity of that term (a purchase, not a parameter)",
    )
    plan.add_argument(
        "--batch-size",
        type=_number(1, 900, int),
        default=None,
        metavar="N",
        help="the most tasks an executor's batch holds, 1 to 900 (ExecutorBatchSize; default the template's)",
    )
    plan.add_argument(
        "--arch",
        choices=("arm64", "x86_64"),
        default="arm64",
        help="the functions' architecture (the template's is arm64; x86_64 prices what it saves)",
    )
    plan.add_argument("--json", action="store_true", help="print one JSON object (with usd_per_million)")
    plan.set_defaults(func=cmd_plan)
    one_task = [a for a in sub.choices.values() if a.prog.split()[-1] in ("get", "cancel", "run-now")]
    for p in (sched, many, lst, redrive, backfill, schedules, *one_task):
        p.add_argument("--aws", action="store_true", help="use AWS (PUNCTUAL_* settings), not the local stack")
    for p in (sched, many, lst, schedules, *one_task):
        p.add_argument(
            "--api",
            action="store_true",
            help="go through the REST API (the local stack's, with its "
            "token; with --aws the one at PUNCTUAL_API_URL, SigV4-signed), not straight to the table",
        )
        p.add_argument(
            "--tenant",
            type=_tenant,
            default=None,
            metavar="NAME",
            help="with --api: as this tenant of the local stack, with its token (default local; "
            "punctual up --tenant NAME serves it)",
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    restore_logging = _setup_logging(args.verbose)
    try:
        return int(args.func(args))
    except PunctualError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        restore_logging()


if __name__ == "__main__":
    sys.exit(main())
