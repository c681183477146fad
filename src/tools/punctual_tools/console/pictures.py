"""The Console page's pictures (``docs/img/console-*.png``), taken in headless Chromium from a local stack that runs a
small workload: tasks spread over the next minutes and a burst, tenants' tasks through the REST API, two recurring
schedules, and webhooks to a closed port that end FAILED in the dead letters.

    .venv/bin/python -m punctual_tools.console.pictures [--out docs/img]     (make console-pictures; ~3 minutes)

Nothing on the pages is staged: each picture shows what the console read from the stack at that moment.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

from playwright.sync_api import Browser, ViewportSize

from punctual.runtime.client import Client
from punctual.scheduling.api_client import ApiClient
from punctual.scheduling.protocol import Scheduler
from punctual.targets.http import HttpAction
from punctual.targets.log import LogAction
from punctual_tools.cli.console import start_console
from punctual_tools.console.browser import chromium
from punctual_tools.console.source import local_source
from punctual_tools.local.stack import LocalStack, StackConfig

log = logging.getLogger("punctual_tools.console.pictures")

ROOT = Path(__file__).resolve().parents[4]
OUT = ROOT / "docs" / "img"
VIEWPORT: ViewportSize = {"width": 1280, "height": 860}
POLL_INTERVAL_S = 5.0
SPREAD = 240  # log tasks spread over the next SPREAD_S seconds
SPREAD_S = 180
BURST = 120  # log tasks due at one instant
BURST_AFTER_S = 45
TENANT_TASKS = 40  # through the REST API as each tenant
FAILING = 4  # webhooks to a closed loopback port: FAILED, dead-lettered
WARM_UP_S = 100  # how long the workload runs before the first picture: two minutes of figures
TENANTS = ("acme", "globex")


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def schedule_workload(client: Scheduler, tenants: Mapping[str, Scheduler], now: datetime) -> str:
    """The workload the pictures show; the id of a task that will have fired by the time they are taken."""
    first = ""
    for i in range(SPREAD):
        due = now + timedelta(seconds=3 + i * SPREAD_S / SPREAD)
        task = client.schedule(due, LogAction(message="reminder"), {"n": i}, task_id=f"reminder-{i:04d}")
        first = first or task.task_id
    burst_at = now + timedelta(seconds=BURST_AFTER_S)
    for i in range(BURST):
        client.schedule(burst_at, LogAction(message="publish"), {"n": i}, task_id=f"publish-{i:04d}")
    port = closed_port()
    for i in range(FAILING):
        hook = HttpAction.model_validate({"url": f"http://127.0.0.1:{port}/hook"})
        client.schedule(now + timedelta(seconds=20 + i), hook, {"order": i}, task_id=f"webhook-{i:02d}")
    client.create_schedule("heartbeat", "rate(2 seconds)", LogAction(message="heartbeat"), {"every": "2 s"})
    client.create_schedule(
        "morning-report", "cron(0 9 ? * MON-FRI *)", LogAction(message="report"), timezone="Europe/Paris"
    )
    for name, api in tenants.items():
        for i in range(TENANT_TASKS):
            api.schedule(now + timedelta(seconds=10 + i * 4), LogAction(message=f"{name} job"), {"n": i})
    return first


SETTLE_MS = 60_000  # how long a picture waits for the page's counts to be done


def take(browser: Browser, url: str, pages: dict[str, str], out: Path) -> list[Path]:
    """A full-page picture of each of ``pages`` (name -> path) of the console at ``url`` (which carries the token)."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.goto(url)  # the token: the console sets its cookie
    base = url.split("/?", 1)[0]
    written = []
    for name, path in pages.items():
        page.goto(base + path)
        page.wait_for_load_state("networkidle")
        # a count still being made shows as such; the page's live part shows it done within a reload or two
        page.wait_for_selector(".counting", state="detached", timeout=SETTLE_MS)
        target = out / f"console-{name}.png"
        page.screenshot(path=str(target), full_page=True)
        written.append(target)
        log.info("%s: %s", name, target)
    context.close()
    return written


def run(out: Path) -> list[Path]:
    """Run the workload on a local stack of its own and take the pictures into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="punctual-pictures-") as tmp:
        home = Path(tmp)
        config = StackConfig(
            home=home,
            port=0,
            in_memory=True,
            poll_interval_s=POLL_INTERVAL_S,
            settings_overrides={"allowed_targets": "127.0.0.1", "ntp_server": None},
            tenants=TENANTS,
        )
        with LocalStack(config) as stack:
            assert stack.settings is not None
            assert stack.api is not None
            apis = {t: ApiClient(stack.api.url, token=stack.api_token_path(t).read_text().strip()) for t in TENANTS}
            fired = schedule_workload(Client(stack.settings), apis, datetime.now(UTC))
            log.info("the workload runs for %d s before the pictures", WARM_UP_S)
            time.sleep(WARM_UP_S)
            running = start_console(local_source(home), home, port=0)
            try:
                with chromium() as browser:
                    return take(
                        browser,
                        running.url,
                        {
                            "now": "/",
                            "tasks": "/tasks",
                            "task": f"/tasks/{fired}",
                            "tenant-tasks": f"/tasks?tenant={TENANTS[0]}",
                            "schedules": "/schedules",
                            "schedule": "/schedules/heartbeat",
                            "dead-letters": "/dead-letters",
                            "tenants": "/tenants",
                        },
                        out,
                    )
            finally:
                running.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m punctual_tools.console.pictures", description=__doc__)
    parser.add_argument("--out", type=Path, default=OUT, help=f"where the pictures go (default {OUT})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for noisy in ("botocore", "urllib3", "werkzeug", "punctual.polling.poller", "punctual.fire"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    for path in run(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
