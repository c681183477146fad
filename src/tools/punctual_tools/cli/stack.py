"""The local stack's verbs: ``up``, ``status`` and ``demo``."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from punctual.config.settings import Settings
from punctual.errors import PunctualError
from punctual_tools.cli.common import api_tenant, api_token, count, home, log, non_negative_ms, tenant_name
from punctual_tools.cli.console import DEFAULT_PORT as CONSOLE_PORT


def stack_config(args: argparse.Namespace, poll_interval_s: float, *, demo_webhooks: bool = False) -> Any:
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
        home=home(args),
        port=args.port,
        in_memory=args.in_memory,
        poll_interval_s=poll_interval_s,
        settings_overrides={k: v for k, v in overrides.items() if v is not None},
        api=getattr(args, "serve_api", True),
        api_port=getattr(args, "api_port", 0),
        **({"prewarm": args.prewarm} if getattr(args, "prewarm", None) is not None else {}),
        tenants=tuple(dict.fromkeys(tenants)),
    )


def print_poll(report: Any) -> None:
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
    stack = LocalStack(stack_config(args, args.poll_interval, demo_webhooks=webhooks > 0), on_poll=print_poll)
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
    console = serve_console(args, stack) if args.serve_console else None
    try:
        if args.demo:

            def demo() -> None:
                report = run_demo(
                    Client(stack.settings),
                    stack.fire_log,
                    args.demo_tasks,
                    args.demo_over,
                    args.demo_burst,
                    poll_interval_ms=stack.settings.poll_interval_ms,  # type: ignore[union-attr]
                    webhooks=webhooks,
                    recurring_ms=args.demo_recurring,
                    receiver_port=stack.settings.receiver_port,  # type: ignore[union-attr]
                    **demo_api(args, stack),
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
        if console is not None:
            console.stop()
        stack.stop()
        log.info("stopped")
    return 0


def serve_console(args: argparse.Namespace, stack: Any) -> Any:
    """The web console over the stack just started, on ``--console-port``: its URL (with the token) printed."""
    from punctual_tools.cli.console import start_console
    from punctual_tools.console.source import local_source

    try:
        running = start_console(local_source(stack.config.home), stack.config.home, port=args.console_port)
    except OSError as exc:
        log.warning(
            "no web console: port %s cannot be listened on (%s); --console-port picks another",
            args.console_port,
            exc.strerror,
        )
        return None
    print(f"Punctual console: {running.url}", flush=True)
    return running


def cmd_status(args: argparse.Namespace) -> int:
    """Print the running local stack's state file once the stack is ready (waiting up to ``--wait`` seconds)."""
    from punctual_tools.local.stack import wait_ready

    state = wait_ready(home(args), args.wait)
    if state is None:
        waited = f" within {args.wait:g} s" if args.wait else ""
        print(f"no local stack is ready{waited} with its home at {home(args)}", file=sys.stderr)
        return 1
    print(json.dumps(state, indent=2))
    return 0


def demo_api(args: argparse.Namespace, stack: Any) -> dict[str, Any]:
    """With ``--api``: the demo schedules through the stack's REST API, as the tenant ``--tenant`` (default
    ``local``; run_demo's arguments); else nothing."""
    tenant = api_tenant(args)
    if not args.api:
        return {}
    from punctual.scheduling.api_client import ApiClient
    from punctual_tools.local.stack import read_state

    if stack is not None and stack.api is not None:
        url, token = stack.api.url, stack.api_token_path(tenant).read_text().strip()
    else:
        state = read_state(home(args)) or {}
        if not state.get("api_url"):
            raise PunctualError("--api: the running stack serves no REST API")
        url, token = state["api_url"], api_token(state, tenant)
    log.info("the demo schedules through the REST API at %s (tenant %r)", url, tenant)
    return {"api": ApiClient(url, token=token), "tenant": tenant}


def cmd_demo(args: argparse.Namespace) -> int:
    from punctual.runtime.client import Client
    from punctual_tools.demo import EPSILON_MS, format_report, loopback_allowed, run_demo
    from punctual_tools.local.stack import LocalStack, _alive, client_settings, read_state

    api_tenant(args)  # a --tenant without --api is refused before anything starts
    state = read_state(home(args))
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
            stack_config(args, args.poll_interval, demo_webhooks=webhooks > 0),
            on_poll=print_poll,
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
            poll_interval_ms=interval,
            out=None if args.quiet else sys.stderr,
            epsilon_ms=EPSILON_MS if args.epsilon_ms is None else args.epsilon_ms,
            webhooks=webhooks,
            recurring_ms=args.recurring,
            receiver_port=receiver_port,
            **demo_api(args, stack),
        )
    finally:
        if stack is not None:
            stack.stop()
    print(json.dumps(report) if args.json else format_report(report), flush=True)
    return 0 if report["checker"]["ok"] else 1


DEMO_RATES = (250, 500, 1000)  # the demo's recurring schedules: rate(N milliseconds) each


def rates(text: str) -> tuple[int, ...]:
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


def add_commands(sub: Any) -> None:
    """Add ``up``, ``status`` and ``demo`` to the subcommands ``sub``."""

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
        type=tenant_name,
        metavar="NAME",
        help="the REST API also serves this tenant, with a token of its own in <home>/tokens/NAME "
        "(repeatable; the tenant local, token in <home>/api-token, is always served)",
    )
    up.add_argument(
        "--prewarm",
        type=count,
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
    up.add_argument(
        "--console-port",
        type=int,
        default=CONSOLE_PORT,
        help="the web console's loopback port (0 picks a free one)",
    )
    up.add_argument("--no-console", dest="serve_console", action="store_false", help="serve no web console")
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
        type=rates,
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
        type=rates,
        default=DEMO_RATES,
        metavar="MS,MS,...",
        help="one recurring schedule per rate in ms over --over seconds "
        f"(default {','.join(map(str, DEMO_RATES))}; 'none': none)",
    )
    demo.add_argument(
        "--epsilon-ms",
        type=non_negative_ms,
        default=None,
        metavar="MS",
        help="the checker's tolerance (default 10): a fire later than due + this is reported late, "
        "one earlier than due - this fails the verdict",
    )
    demo.add_argument("--api", action="store_true", help="schedule through the stack's REST API, not the table")
    demo.add_argument(
        "--tenant",
        type=tenant_name,
        default=None,
        metavar="NAME",
        help="with --api: as this tenant (default local; a stack the demo starts serves it)",
    )
    demo.add_argument("--json", action="store_true", help="print one JSON object")
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    demo.set_defaults(func=cmd_demo)
