"""What the fault scenarios share: tasks aimed at the loopback target, stand-in invokers (one that loses the
batch, one that runs it at once, one that kills the poller half way), injected faults (stores as a process
sees them when it dies at a chosen step, an index that lags, a throttling store), the raw items a scenario
inspects (a heartbeat, a task's takeover marks), and the verdict. What the other tiers use too (``now_ms``,
``wait_until``, ``create_all``, ``store_for``, ``run_threads``, ``RecordingInvoker``, ``arm``) is in
tests/support.py.

Each scenario ends with :func:`judge`: the checker's verdict from the tasks as the table has them and the fires
the loopback target saw (or fires a scenario recorded itself), printed (``make faults`` shows it) and
asserted: 0 lost, 0 unexplained extras.
"""

from __future__ import annotations

import json
import os
import platform
import random
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from botocore.awsrequest import AWSResponse

from punctual.config.settings import Settings
from punctual.domain.events import BatchEvent, BatchReport
from punctual.domain.model import Armed, ArmRequest, FireRecord, Task
from punctual.executing.executor import Executor
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.dynamodb.due import DueIndex, IndexEntry
from punctual.stores.dynamodb.executors import Executors
from punctual.targets import HttpAction
from punctual_tools.checker import Expected, Fire, Verdict, check, expected_from_tasks, fires_from_target
from punctual_tools.crashes import (  # noqa: F401 - the scenarios import them from here
    alive_until,
    all_takeover_marks,
    crash_window,
    crash_windows,
    dead_for_good,
    raw_item,
    takeover_marks,
)
from punctual_tools.local.dynamodb_local import make_client
from punctual_tools.local.target import TargetServer
from support import RecordingInvoker, join_all, make_tasks, store_for

EPSILON_MS = 1_500  # "late" / "early" tolerance: generous, timing figures are the benchmark's business
JOIN_TIMEOUT_S = 60
# Executor leases for real-time scenarios: short enough that a takeover happens within the test, generous
# enough that a slow machine never misses a renewal (a renewal every second, 3 s of fencing to spare).
SHORT_LEASE = {"executor_lease_ms": 5_000, "heartbeat_interval_ms": 1_000}


# -- tasks --------------------------------------------------------------------------------------------------
def http_tasks(prefix: str, dues: Iterable[int], url: str, grace_ms: int = 60_000, **fields: Any) -> list[Task]:
    """One task per due instant, each POSTing ``{"i": n}`` to ``url`` (the loopback target), once per fire: the
    scenarios count fires at the target, so the executor's own quick retry of a 5xx is off here (its tests are
    tests/functional/test_http_action.py)."""
    return make_tasks(prefix, dues, HttpAction(url=url, timeout_s=5, retry_transient=False), grace_ms, **fields)


def put_all(settings: Settings, tasks: list[Task], created_ms: int) -> None:
    """Store many tasks fast: the items CREATE would put (written at ``created_ms``), by BatchWriteItem, 25 a
    request, 8 requests at a time (for volume scenarios; the tasks must be new)."""
    store = store_for(settings)
    items = [store.client.item_of(t, created_ms) for t in tasks]
    chunks = [items[i : i + 25] for i in range(0, len(items), 25)]
    local = threading.local()

    def write(chunk: list[dict[str, Any]]) -> None:
        if not hasattr(local, "client"):
            local.client = make_client(settings.endpoint_url)
        requests = {settings.table_name: [{"PutRequest": {"Item": item}} for item in chunk]}
        for _ in range(20):
            requests = local.client.batch_write_item(RequestItems=requests).get("UnprocessedItems") or {}
            if not requests:
                return
        raise AssertionError("BatchWriteItem left items unprocessed after 20 attempts")

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(write, chunks))


# -- raw items (punctual_tools.crashes) ------------------------------------------------------------------


# -- invokers (Lambda async invoke stand-ins) -----------------------------------------------------------------
class DroppingInvoker(RecordingInvoker):
    """Accepts the batch and loses it: the poller crashed right after invoking (or the event was lost before
    any executor got it). The payloads are kept only to count what was lost."""


class InlineInvoker:
    """Runs each invocation at once on a fresh executor in a thread of its own (like a Lambda environment)."""

    def __init__(self, make_executor: Callable[[], Executor]) -> None:
        self._make = make_executor
        self.reports: list[BatchReport] = []
        self.events: list[BatchEvent] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def invoke_async(self, payload: dict[str, Any]) -> None:
        event = BatchEvent.model_validate(payload)
        executor = self._make()

        def run() -> None:
            report = executor.run_batch(event)
            with self._lock:
                self.reports.append(report)

        thread = threading.Thread(target=run, name="inline-executor", daemon=True)
        with self._lock:
            self._threads.append(thread)
            self.events.append(event)
        thread.start()

    @property
    def task_ids(self) -> list[str]:
        """The ids of the tasks in every batch invoked so far."""
        with self._lock:
            return [t.task_id for e in self.events for t in e.tasks]

    def join(self, timeout: float = JOIN_TIMEOUT_S) -> None:
        with self._lock:
            threads = list(self._threads)
        join_all(threads, timeout, "executors")


class PollerKilled(BaseException):  # not an error the poller may handle: its process ends here
    """The poller's process dies (out of memory, a runtime crash) in the middle of an invocation."""


class KillsPollerAfter(InlineInvoker):
    """Runs the first ``accepted`` invocations (as :class:`InlineInvoker`), then kills the poller: every
    further invocation raises :class:`PollerKilled`, which no ``except Exception`` stops."""

    def __init__(self, make_executor: Callable[[], Executor], accepted: int) -> None:
        super().__init__(make_executor)
        self.accepted = accepted
        self.refused = 0
        self._count_lock = threading.Lock()

    def invoke_async(self, payload: dict[str, Any]) -> None:
        with self._count_lock:
            if self.accepted <= 0:
                self.refused += 1
                raise PollerKilled("the poller died mid-dispatch")
            self.accepted -= 1
        super().invoke_async(payload)


class TickBudget:
    """A tick's remaining time on a clock the scenario moves (Lambda's ``get_remaining_time_in_millis``): work
    :meth:`spend` s of it; :meth:`out_of_time` is true once the budget is used up."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self.used_s = 0.0
        self._lock = threading.Lock()

    def spend(self, seconds: float) -> None:
        with self._lock:
            self.used_s += seconds

    def out_of_time(self) -> bool:
        with self._lock:
            return self.used_s >= self.budget_s


class SlowInvoker:
    """Wraps an invoker: each invocation costs ``cost_s`` of a :class:`TickBudget`."""

    def __init__(self, invoker: Any, budget: TickBudget, cost_s: float) -> None:
        self._invoker, self._budget, self._cost_s = invoker, budget, cost_s

    def invoke_async(self, payload: dict[str, Any]) -> None:
        self._budget.spend(self._cost_s)
        self._invoker.invoke_async(payload)


# -- injected faults ----------------------------------------------------------------------------------------
class ProcessDiedError(ConnectionError):
    """What a write of a dead executor process comes to: it never reaches the table."""


class _DyingStore(Executors):
    """The executor's writes (the store's firing part) when its process has died once ``dead`` is set: its
    heartbeat is no longer renewed (nor retired: it lapses at its last ``alive_until``) and nothing it hands back
    reaches the table."""

    dead = False

    def heartbeat(self, executor_id: str, now_ms: int, alive_until_ms: int, invocation: str | None = None) -> bool:
        if self.dead:
            raise ProcessDiedError("executor process died: its heartbeat stopped")
        return super().heartbeat(executor_id, now_ms, alive_until_ms, invocation)

    def release(self, task_id: str, executor_id: str) -> bool:
        return False if self.dead else super().release(task_id, executor_id)


class DiesAfterArm(_DyingStore):
    """The store as an executor process sees it when Lambda drops the process right after it armed its batch
    (out of memory, a runtime crash): from then on nothing it would write reaches the table - no heartbeat
    renewal (so its heartbeat is never retired either: it simply lapses), no outcome, no release.

    An executor arms a batch in parts (soonest due first): the process dies once ``die_after`` tasks have been
    asked for (None: after the first part). ``on_armed`` is called then; a scenario passes the executor's
    ``request_stop`` there, so that the dropped executor fires nothing more (its dispatcher is emptied; a task
    of an earlier part already due may have fired)."""

    on_armed: Callable[[], None] | None = None
    die_after: int | None = None
    asked = 0

    def arm_many(
        self, requests: list[ArmRequest], batch_id: str, executor_id: str, now_ms: int, invocation: str | None = None
    ) -> list[Armed | None]:
        result = super().arm_many(requests, batch_id, executor_id, now_ms, invocation)
        self.asked += len(requests)
        if self.die_after is None or self.asked >= self.die_after:
            self.dead = True
            if self.on_armed is not None:
                self.on_armed()
        return result

    def record(self, executor_id: str, record: FireRecord) -> bool:
        return False if self.dead else super().record(executor_id, record)

    def record_many(self, executor_id: str, records: list[FireRecord]) -> list[bool]:
        return [False] * len(records) if self.dead else super().record_many(executor_id, records)


class DiesAfterFire(_DyingStore):
    """The executor fires, then its process dies as it starts recording: no outcome reaches the table, and
    from that moment its heartbeat is no longer renewed (nor retired): it lapses at its last ``alive_until``."""

    def record(self, executor_id: str, record: FireRecord) -> bool:
        self.dead = True
        raise ProcessDiedError("executor process died before recording")

    def record_many(self, executor_id: str, records: list[FireRecord]) -> list[bool]:
        self.dead = True
        raise ProcessDiedError("executor process died before recording")


class NotesArmTime(Executors):
    """The executor's real writes (the store's firing part), noting when ``arm_many`` returned (wall ms, the store's
    clock): the instant an executor taking over a dead one's tasks owns them (the end of the crash window)."""

    armed_at_ms: int | None = None

    def arm_many(
        self, requests: list[ArmRequest], batch_id: str, executor_id: str, now_ms: int, invocation: str | None = None
    ) -> list[Armed | None]:
        result = super().arm_many(requests, batch_id, executor_id, now_ms, invocation)
        self.armed_at_ms = time.time_ns() // 1_000_000
        return result


class LaggingIndex(DueIndex):
    """A due index whose entries for ``hidden`` task ids have not been written yet (GSIs are eventually
    consistent): queries leave them out until the test clears ``hidden``."""

    hidden: frozenset[str] = frozenset()

    def query_index(self, bucket_ms: int, shard: int, until_ms: int) -> list[IndexEntry]:
        hidden = self.hidden
        return [e for e in super().query_index(bucket_ms, shard, until_ms) if e.task_id not in hidden]


class SlowIndex(DueIndex):
    """A due index whose every query costs ``cost_s`` of a :class:`TickBudget` (a tick reading many pages)."""

    budget: TickBudget | None = None
    cost_s = 1.0

    def query_index(self, bucket_ms: int, shard: int, until_ms: int) -> list[IndexEntry]:
        if self.budget is not None:
            self.budget.spend(self.cost_s)
        return super().query_index(bucket_ms, shard, until_ms)


class _Body:
    """The raw body of a canned response (what ``AWSResponse.content`` streams)."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterable[bytes]:
        yield self._data


class Throttle:
    """A botocore ``before-send`` hook: answers a fraction of DynamoDB requests with HTTP 400
    ProvisionedThroughputExceededException instead of sending them.

    Bounded: at most ``max_in_a_row`` injected failures in a row on one thread (botocore retries a request on
    the thread that made it), well under the client's 8 attempts, so every request gets through in the end.
    """

    BODY = json.dumps(
        {
            "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
            "message": "injected by the fault suite: the request rate is too high",
        }
    ).encode()

    WRITES = frozenset({"UpdateItem", "TransactWriteItems", "PutItem", "BatchWriteItem"})

    def __init__(self, rate: float, max_in_a_row: int = 2, seed: int = 4, first_writes: int = 2) -> None:
        self.rate = rate
        self.max_in_a_row = max_in_a_row
        self.first_writes = first_writes  # the first few writes are throttled whatever the dice say
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._streak = threading.local()
        self.sent = 0
        self.injected: dict[str, int] = {}

    def install(self, client: Any) -> Any:
        client.meta.events.register("before-send.dynamodb", self)
        return client

    def __call__(self, request: Any, **_: Any) -> AWSResponse | None:
        streak = getattr(self._streak, "n", 0)
        raw = request.headers.get("X-Amz-Target", "")
        operation = (raw.decode() if isinstance(raw, bytes) else str(raw)).rpartition(".")[2] or "?"
        with self._lock:
            forced = streak == 0 and operation in self.WRITES and self.first_writes > 0
            inject = forced or (streak < self.max_in_a_row and self._rng.random() < self.rate)
            if forced:
                self.first_writes -= 1
            if inject:
                self.injected[operation] = self.injected.get(operation, 0) + 1
            else:
                self.sent += 1
        self._streak.n = streak + 1 if inject else 0
        if not inject:
            return None
        headers = {"Content-Type": "application/x-amz-json-1.0", "x-amzn-RequestId": "fault-suite"}
        return AWSResponse(request.url, 400, headers, _Body(self.BODY))  # type: ignore[arg-type]  # read as a mapping


# -- the verdict --------------------------------------------------------------------------------------------
def judge(
    title: str,
    store: DynamoStores,
    task_ids: Iterable[str],
    target: TargetServer | Iterable[Fire],
    *,
    allowance: Iterable[str] = (),
    epsilon_ms: float = EPSILON_MS,
    late_is_failure: bool = False,
    extra_expected: Iterable[Expected] = (),
    windows: Iterable[tuple[float, float]] = (),
) -> Verdict:
    """The checker's verdict on these tasks (as the table has them now) against the fires the target saw (or
    the fires given), printed, then asserted: nothing lost, no unexplained extra (and whatever else makes it
    fail). ``extra_expected`` adds occurrences the table cannot hand back as tasks (items that are not tasks);
    ``windows`` are the crash windows (:func:`crash_window`): the verdict prints how many tasks were due in them
    and how many of those were MISSED, and fails on a MISSED task due outside them."""
    ids = list(task_ids)
    stored = store.client.get_many(ids)
    assert set(stored) == set(ids), f"tasks missing from the table: {sorted(set(ids) - set(stored))[:5]}"
    fires = fires_from_target(target.records()) if isinstance(target, TargetServer) else list(target)  # type: ignore[arg-type]  # the checker's protocol asks for writable fields; a Received's are read-only
    verdict = check(
        [*expected_from_tasks(stored.values()), *extra_expected],
        fires,
        epsilon_ms=epsilon_ms,
        allowance=allowance,
        late_is_failure=late_is_failure,
        windows=windows,
    )
    print(f"\n{verdict.format(title)}")
    outside = [(key, stored[key.rpartition(":")[0]].detail) for key in verdict.missed_outside_window[:5]]
    assert verdict.ok, verdict.format(title) + (f"\nMISSED outside the windows: {outside}" if outside else "")
    assert not verdict.lost
    assert not verdict.unexplained
    return verdict


# -- the figures make faults publishes -----------------------------------------------------------------------
# make faults names docs/benchmarks/faults.json; punctual_tools.bench.pages renders it
REPORT_ENV = "PUNCTUAL_FAULTS_REPORT"
COMMIT_ENV = "PUNCTUAL_FAULTS_COMMIT"  # ... and the commit it runs


def report_figures(scenario: str, figures: dict[str, Any]) -> None:
    """Keep ``scenario``'s figures in the JSON file :data:`REPORT_ENV` names, with the machine and the commit they
    were measured on (:data:`COMMIT_ENV`, which ``make faults`` sets); nothing when it is unset: a single test run
    publishes nothing."""
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    report = Path(path)
    data = json.loads(report.read_text()) if report.is_file() else {}
    data.setdefault("scenarios", {})[scenario] = {
        **figures,
        "machine": f"{platform.node()} ({os.cpu_count()} cores)",
        "commit": os.environ.get(COMMIT_ENV) or None,
    }
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
