"""The console's pages over a table of 100,000 tasks: how long the server takes to answer each, against the 300 ms
target and against the same page over an empty table (the floor, measured in the same run).

    .venv/bin/python -m punctual_tools.bench.console [--tasks 100000] [--repeats 20] [--publish]   (make bench-console)

The console runs in this process over DynamoDB Local (in memory, on loopback) and the pages are asked for through
the WSGI app itself: the time is the server's (reading the store, rendering), not a browser's. Each page's store
calls are counted too: against AWS each adds the round trip to the region, which DynamoDB Local on loopback does
not have; the page says so beside the figures. With ``--publish`` the run's JSON and its page go to
``docs/benchmarks/console.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from punctual.config.clients import aws_client
from punctual.config.settings import Settings
from punctual.domain.keys import bucket_start, from_ms
from punctual.domain.model import Task
from punctual.runtime.client import Client
from punctual.stores.dynamodb import DynamoStores
from punctual.targets.http import HttpAction
from punctual.targets.log import LogAction
from punctual_tools.bench.pages import PAGES, git_commit
from punctual_tools.console.app import create_app
from punctual_tools.console.counts import FRESH_S, PAGE_WAIT_S, KeptCounts
from punctual_tools.console.figures import minutes_of
from punctual_tools.console.model import MinuteFigures
from punctual_tools.console.source import COUNT_THREADS, OperatorSource, background_count
from punctual_tools.iam.calls import AwsCall
from punctual_tools.iam.recorder import watch_client
from punctual_tools.local.dynamodb_local import DynamoDBLocal
from punctual_tools.stats import summarize
from punctual_tools.template.table import ensure_table

if TYPE_CHECKING:
    from flask.testing import FlaskClient
    from mypy_boto3_dynamodb import DynamoDBClient

log = logging.getLogger("punctual_tools.bench.console")

TARGET_MS = 300.0  # a page over 100,000 tasks renders within this on the server (its p99 here)
TENANT = "bench"
SPAN_MS = 2 * 3_600_000  # the tasks are due over the next two hours
HTTP_EVERY = 5  # one task in five is a webhook (the kind filter's share)
WRITERS = 8  # threads writing the seed
WRITE_CHUNK = 25  # BatchWriteItem's most
SCHEDULES = 20
PAGE_WALK = 10  # the Tasks page followed by its cursor this many times: the 10th page's time
TOKEN = "bench-console-token"  # the benchmark's own console, in this process only


@dataclass(frozen=True, slots=True)
class Page:
    name: str
    path: str  # may hold {task_id}, {cursor}
    what: str  # what the page shows and how it reads it (kept with each run's figures: the page renders the run's)
    first_visit: bool = False  # each request finds no count kept (the Tenants page's first visit): it starts one


PAGE_LIST = (
    Page("now", "/", "Now: due per second over 5 minutes (the due index, keys only), the last hour, executors"),
    Page("now-live", "/now/live", "Now's live part, as the page reloads it every 2 s"),
    Page("tasks", "/tasks", "Tasks, first page: active tasks in due order (the due index)"),
    Page("tasks-page-10", "/tasks?after={cursor}", f"Tasks, page {PAGE_WALK} (by the cursor of the one before)"),
    Page("tenant", f"/tasks?tenant={TENANT}", "a tenant's tasks, first page (the tenant index)"),
    Page("tenant-http", f"/tasks?tenant={TENANT}&kind=http", "a tenant's webhooks (the tenant index, filtered)"),
    Page("task", "/tasks/{task_id}", "one task with its timeline"),
    Page(
        "schedules",
        "/schedules",
        f"Schedules ({SCHEDULES}): their keys from the schedule index's registry, then their items by key",
    ),
    Page(
        "tenants-first",
        "/tenants",
        f"Tenants, a first visit: its active-task count is started and waited for at most {PAGE_WAIT_S * 1000:.0f} ms",
        first_visit=True,
    ),
    Page("tenants", "/tenants", "Tenants: quota use, the active-task count kept from a visit before"),
)

COUNTING = 'class="counting"'  # what a Tenants page shows for a count not done yet


def _tasks(count: int, now_ms: int) -> Iterator[Task]:
    log_action = LogAction(message="bench")
    http_action = HttpAction(url="https://hooks.example.com/bench")
    for i in range(count):
        yield Task(
            task_id=f"{TENANT}/t-{i:06d}",
            due_at=from_ms(now_ms + 60_000 + i * SPAN_MS // count),
            action=http_action if i % HTTP_EVERY == 0 else log_action,
            payload={"i": i},
        )


def seed(ddb: DynamoDBClient, settings: Settings, count: int, now_ms: int) -> float:
    """Write ``count`` PENDING tasks of the tenant straight into the table (their items as the store writes them, in
    BatchWriteItem calls): how many seconds it took."""
    items = DynamoStores.from_settings(ddb, settings).client

    def put(chunk: list[Task]) -> None:
        requests: list[Any] = [{"PutRequest": {"Item": items.item_of(task, now_ms)}} for task in chunk]
        while requests:
            answer = ddb.batch_write_item(RequestItems={settings.table_name: requests})
            requests = list(answer.get("UnprocessedItems", {}).get(settings.table_name, []))

    started = time.monotonic()
    tasks = list(_tasks(count, now_ms))
    chunks = [tasks[i : i + WRITE_CHUNK] for i in range(0, len(tasks), WRITE_CHUNK)]
    with ThreadPoolExecutor(WRITERS) as pool:
        for done, _ in enumerate(pool.map(put, chunks), 1):
            if done % 400 == 0:
                log.info("seeded %d of %d tasks", done * WRITE_CHUNK, count)
    return time.monotonic() - started


class CallCounter:
    """Counts the DynamoDB calls a client makes, by operation (watched as the IAM check watches a client)."""

    def __init__(self, ddb: DynamoDBClient) -> None:
        self.calls: dict[str, int] = {}
        watch_client(ddb, self._count)

    def _count(self, call: AwsCall) -> None:
        self.calls[call.operation] = self.calls.get(call.operation, 0) + 1

    def take(self) -> dict[str, int]:
        calls, self.calls = self.calls, {}
        return calls


def measure(
    client: FlaskClient, path: str, repeats: int, counter: CallCounter, first_visits: KeptCounts | None = None
) -> dict[str, Any]:
    """``repeats`` requests of ``path`` after one untimed (the first compiles its templates): the server's time for
    each (ms), and the store calls of one. With ``first_visits``, each request finds no count kept (they are
    forgotten before it), and the count it starts is waited for after it, untimed."""
    client.get(path)
    times = []
    counting = 0
    counter.take()
    for _ in range(repeats):
        if first_visits is not None:
            first_visits.settle()
            first_visits.forget()
        started = time.perf_counter()
        answer = client.get(path)
        times.append((time.perf_counter() - started) * 1000)
        html = answer.get_data(as_text=True)
        if answer.status_code != 200:  # noqa: PLR2004  HTTP's OK
            raise RuntimeError(f"{path}: {answer.status_code} {html[:300]}")
        counting += COUNTING in html
    calls = counter.take()
    return {
        "path": path,
        "ms": summarize(times),
        "store_calls": {name: n // repeats for name, n in sorted(calls.items())},
        "answers_counting": counting,
    }


def _walk(client: FlaskClient, pages: int) -> str:
    """The cursor of the Tasks page ``pages`` pages in (following each page's "next" link)."""
    path = "/tasks"
    cursor = ""
    for _ in range(pages - 1):
        html = client.get(path).get_data(as_text=True)
        found = re.search(r'href="(/tasks\?[^"]*after=([^"&]+)[^"]*)"', html)
        if found is None:
            raise RuntimeError("the Tasks page has no next page")
        path, cursor = found.group(1).replace("&amp;", "&"), found.group(2)
    return cursor


def measure_pages(
    client: FlaskClient, counter: CallCounter, counts: KeptCounts, repeats: int, *, task_id: str | None
) -> dict[str, Any]:
    """Every page of :data:`PAGE_LIST` this table can show (the task page only with ``task_id``); ``counts`` are the
    console's kept counts, which a first visit's page forgets before each request."""
    cursor = _walk(client, PAGE_WALK) if task_id else None
    figures: dict[str, Any] = {}
    for page in PAGE_LIST:
        if ("{task_id}" in page.path and task_id is None) or ("{cursor}" in page.path and cursor is None):
            continue
        path = page.path.format(task_id=task_id, cursor=cursor)
        first_visits = counts if page.first_visit else None
        figures[page.name] = {"what": page.what, **measure(client, path, repeats, counter, first_visits)}
        counts.settle()
        log.info("%s: p99 %.1f ms", page.name, figures[page.name]["ms"]["p99"])
    return figures


def no_figures(now_ms: int) -> list[MinuteFigures]:
    """The last hour with nothing fired: the benchmark runs no executor."""
    return minutes_of([], now_ms)


def bench_source(settings: Settings, ddb: DynamoDBClient) -> OperatorSource:
    """The operator's source over the table (no stack runs: no batch log, no dead-letter queue)."""
    stores = DynamoStores.from_settings(ddb, settings)
    return OperatorSource(
        label=f"benchmark table {settings.table_name}",
        stores=stores,
        client=Client(settings, stores=stores),
        dead_letter_queue=None,
        figures=no_figures,
        figures_note="the benchmark runs no executor",
        tenant_names=(TENANT,),
        count_active=background_count(ddb, settings),
    )


@contextmanager
def console_over(endpoint: str) -> Iterator[tuple[FlaskClient, CallCounter, KeptCounts, DynamoDBClient, Settings]]:
    """A console app over the table on ``endpoint`` (its own client, counted), logged in, and its kept counts."""
    settings = Settings.from_env(endpoint_url=endpoint, table_name="PunctualConsoleBench", ntp_server=None)
    ddb = aws_client("dynamodb", settings.endpoint_url, settings.region)
    ensure_table(ddb, settings.table_name)
    counter = CallCounter(ddb)
    source = bench_source(settings, ddb)
    app = create_app(source, token=TOKEN)
    client = app.test_client()
    client.get(f"/?token={TOKEN}")
    yield client, counter, source.active_counts, ddb, settings


def run(tasks: int, repeats: int) -> dict[str, Any]:
    server = DynamoDBLocal(data_dir=None, in_memory=True)
    endpoint = server.start()
    try:
        with console_over(endpoint) as (client, counter, counts, ddb, settings):
            log.info("floor: the pages over an empty table")
            floor = measure_pages(client, counter, counts, repeats, task_id=None)
            now_ms = int(time.time() * 1000)
            log.info("seeding %d tasks", tasks)
            seed_s = seed(ddb, settings, tasks, now_ms)
            # A running stack's poller keeps its watermark (where the due index's active tasks start); without one
            # the index is scanned once to find it (a deployment before its first poll), which is not a page's cost
            DynamoStores.from_settings(ddb, settings).dispatch.advance_watermark(bucket_start(now_ms))
            scheduler = Client(settings, dynamodb=ddb)
            for i in range(SCHEDULES):
                scheduler.create_schedule(f"every-{i + 1}-minutes", f"rate({i + 1} minutes)", LogAction(message="x"))
            log.info("the pages over %d tasks", tasks)
            full = measure_pages(client, counter, counts, repeats, task_id=f"{TENANT}/t-{tasks // 2:06d}")
            started = time.perf_counter()
            active = background_count(ddb, settings)(TENANT)
            count_s = time.perf_counter() - started
            log.info("counting %d active tasks of %s: %.2f s", active, TENANT, count_s)
    finally:
        server.stop()
    return {
        "commit": git_commit(),
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "tasks": tasks,
        "repeats": repeats,
        "seed_s": round(seed_s, 1),
        "target_ms": TARGET_MS,
        "footing": "DynamoDB Local in memory on loopback, the console in the same process (its WSGI app asked "
        "directly); against AWS each store call also pays the round trip to the region",
        "floor": floor,
        "pages": full,
        "tenant_count": {
            "active": active,
            "s": round(count_s, 2),
            "at_once": COUNT_THREADS,
            "page_wait_s": PAGE_WAIT_S,
            "fresh_s": FRESH_S,
        },
    }


def verdict(report: dict[str, Any], name: str) -> dict[str, Any]:
    """One page's figures against the target and its floor."""
    page = report["pages"][name]
    p99 = float(page["ms"]["p99"])
    floor = report["floor"].get(name)
    floor_p99 = float(floor["ms"]["p99"]) if floor else None
    return {
        "p99_ms": p99,
        "met": p99 <= report["target_ms"],
        "floor_p99_ms": floor_p99,
        "ratio": None if not floor_p99 else p99 / floor_p99,
    }


def scanning(report: dict[str, Any]) -> str:
    """The pages whose store calls hold a Scan, in words."""
    names = [name for name, page in report["pages"].items() if "Scan" in page["store_calls"]]
    return ", ".join(f"`{name}`" for name in names) or "none"


def render(report: dict[str, Any]) -> str:
    """The benchmark's page, from its JSON."""
    rows = []
    for page in PAGE_LIST:
        if page.name not in report["pages"]:
            continue
        figures = report["pages"][page.name]
        what = figures.get("what", page.what)  # the label the run measured it under
        v = verdict(report, page.name)
        calls = ", ".join(f"{n} {op}" for op, n in figures["store_calls"].items()) or "none"
        floor = "-" if v["floor_p99_ms"] is None else f"{v['floor_p99_ms']:.1f} ms"
        ratio = "-" if v["ratio"] is None else f"{v['ratio']:.1f}×"
        rows.append(
            f"| {what} | {figures['ms']['p50']:.1f} | **{v['p99_ms']:.1f}** | {figures['ms']['max']:.1f} | "
            f"{'met' if v['met'] else '**missed**'} | {floor} | {ratio} | {calls} |"
        )
    met = sum(verdict(report, name)["met"] for name in report["pages"])
    return "\n".join(
        [
            "# Console benchmark",
            "",
            "<!-- generated by punctual_tools.bench.console from console.json; do not edit -->",
            "",
            f"The console's pages over a table of **{report['tasks']:,} tasks** (tenant `{TENANT}`, due over the next "
            f"two hours, one in {HTTP_EVERY} a webhook) and {SCHEDULES} schedules: the server's time to answer each "
            f"page, {report['repeats']} times after one untimed request, against the target of "
            f"{report['target_ms']:.0f} ms (its p99), and "
            "against the same page over an empty table measured in the same run (the floor).",
            "",
            f"Run: commit `{report['commit']}`, {report['at']}; `make bench-console`. Footing: {report['footing']}.",
            "",
            f"**{met} of {len(report['pages'])} pages within the target.**",
            "",
            "| page | p50 ms | p99 ms | max ms | target | floor p99 | p99 / floor | store calls a page |",
            "| --- | ---: | ---: | ---: | --- | ---: | ---: | --- |",
            *rows,
            "",
            "The store calls are what the page costs against DynamoDB in AWS: each is a round trip to the region "
            "from where the console runs (a few ms from inside the region, tens of ms from a laptop), which DynamoDB "
            f"Local on loopback does not charge. Pages that scan the table: {scanning(report)}.",
            "",
            *counted(report),
        ]
    )


def counted(report: dict[str, Any]) -> list[str]:
    """What the Tenants page's answers showed of a tenant's active-task count, and what that count takes."""
    count = report.get("tenant_count")
    if count is None:
        return []
    first = report["pages"].get("tenants-first", {})
    return [
        f"Behind the Tenants page: counting `{TENANT}`'s {count['active']:,} active tasks (a COUNT query of each of "
        f"its 32 keys of the count index, {count.get('at_once', 32)} at a time, every entry read) took "
        f"**{count['s']:.2f} s** here. A count is kept {count['fresh_s']:.0f} s and then made again in the "
        f"background; a page waits for one being made at most {count['page_wait_s'] * 1000:.0f} ms, and past that "
        "shows it as being counted (the page's live part shows the count once it is done). Of a first visit's "
        f"{report['repeats']} timed answers, "
        f"{first.get('answers_counting', 0)} showed the count being made. While a count runs here, DynamoDB Local "
        "reads its entries on the same two cores as the page's own queries; on AWS the table's servers count.",
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m punctual_tools.bench.console", description=__doc__)
    parser.add_argument("--tasks", type=int, default=100_000, help="tasks in the table (default 100,000)")
    parser.add_argument("--repeats", type=int, default=20, help="requests of each page (default 20)")
    parser.add_argument("--publish", action="store_true", help="write docs/benchmarks/console.{json,md}")
    parser.add_argument(
        "--render", action="store_true", help="only make the page again from docs/benchmarks/console.json"
    )
    args = parser.parse_args(argv)
    if args.render:
        (PAGES / "console.md").write_text(render(json.loads((PAGES / "console.json").read_text())))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for noisy in ("botocore", "urllib3", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    report = run(args.tasks, args.repeats)
    page = render(report)
    print(page)
    if args.publish:
        (PAGES / "console.json").write_text(json.dumps(report, indent=2) + "\n")
        (PAGES / "console.md").write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
