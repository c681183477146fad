"""What the fault scenarios share: tasks aimed at the loopback target, stand-in invokers, injected faults
(repositories that die at a chosen step, an index that lags, a throttling store), and the verdict. What the
other tiers use too (``now_ms``, ``wait_until``, ``create_all``, ``repo_for``, ``run_threads``,
``RecordingInvoker``) is in tests/support.py.

Each scenario ends with :func:`judge`: the checker's verdict from the tasks as the table has them and the fires
the loopback target saw, printed (``make faults`` shows it) and asserted: 0 lost, 0 unexplained extras.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Iterable
from typing import Any

from botocore.awsrequest import AWSResponse

from punctual.dynamodb.store import DynamoTaskStore, IndexEntry
from punctual.events import BatchEvent, BatchReport
from punctual.executor import Executor
from punctual.model import FireRecord, HttpAction, Task
from punctual_tools.checker import Verdict, check, expected_from_tasks, fires_from_target
from punctual_tools.local.target import TargetServer
from support import RecordingInvoker, join_all, make_tasks

EPSILON_MS = 1_500  # "late" / "early" tolerance: generous, timing figures are the benchmark's business
JOIN_TIMEOUT_S = 60


# -- tasks --------------------------------------------------------------------------------------------------
def http_tasks(prefix: str, dues: Iterable[int], url: str, grace_ms: int = 60_000, **fields: Any) -> list[Task]:
    """One task per due instant, each POSTing ``{"i": n}`` to ``url`` (the loopback target)."""
    return make_tasks(prefix, dues, HttpAction(url=url, timeout_s=5), grace_ms, **fields)


# -- invokers (Lambda async invoke stand-ins) -----------------------------------------------------------------
class DroppingInvoker(RecordingInvoker):
    """Accepts the batch and loses it: the poller crashed right after claiming (or the event was lost). The
    payloads are kept only to count what was lost."""


class InlineInvoker:
    """Runs each invocation at once on a fresh executor in a thread of its own (like a Lambda environment)."""

    def __init__(self, make_executor: Callable[[], Executor]) -> None:
        self._make = make_executor
        self.reports: list[BatchReport] = []
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
        thread.start()

    def join(self, timeout: float = JOIN_TIMEOUT_S) -> None:
        with self._lock:
            threads = list(self._threads)
        join_all(threads, timeout, "executors")


# -- injected faults ----------------------------------------------------------------------------------------
class DiesAfterArm(DynamoTaskStore):
    """The store as an executor process sees it when the process dies after arming: nothing it would write
    afterwards (a release on stop, an outcome) reaches the table."""

    def release(self, task_id: str, executor_id: str) -> bool:
        return False

    def record(self, executor_id: str, record: FireRecord) -> bool:
        return False

    def record_many(self, executor_id: str, records: list[FireRecord]) -> list[bool]:
        return [False] * len(records)


class DiesAfterFire(DynamoTaskStore):
    """The executor fires, then its process dies before recording: the outcome write never arrives."""

    def record(self, executor_id: str, record: FireRecord) -> bool:
        raise ConnectionError("executor process died before recording")

    def record_many(self, executor_id: str, records: list[FireRecord]) -> list[bool]:
        raise ConnectionError("executor process died before recording")


class LaggingIndex(DynamoTaskStore):
    """A due index whose entries for ``hidden`` task ids have not been written yet (GSIs are eventually
    consistent): queries leave them out until the test clears ``hidden``."""

    hidden: frozenset[str] = frozenset()

    def query_index(self, bucket_ms: int, shard: int, until_ms: int) -> list[IndexEntry]:
        hidden = self.hidden
        return [e for e in super().query_index(bucket_ms, shard, until_ms) if e.task_id not in hidden]


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

    BODY = json.dumps({
        "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
        "message": "injected by the fault suite: the request rate is too high",
    }).encode()

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
        return AWSResponse(request.url, 400, headers, _Body(self.BODY))


# -- the verdict --------------------------------------------------------------------------------------------
def judge(title: str, repo: DynamoTaskStore, task_ids: Iterable[str], target: TargetServer,
          allowance: Iterable[str] = (), epsilon_ms: float = EPSILON_MS, late_is_failure: bool = False) -> Verdict:
    """The checker's verdict on these tasks (as the table has them now) against the target's records;
    printed, then asserted: nothing lost, no unexplained extra (and whatever else makes it fail)."""
    ids = list(task_ids)
    stored = repo.get_many(ids)
    assert set(stored) == set(ids), f"tasks missing from the table: {sorted(set(ids) - set(stored))[:5]}"
    verdict = check(expected_from_tasks(stored.values()), fires_from_target(target.records()),
                    epsilon_ms=epsilon_ms, allowance=allowance, late_is_failure=late_is_failure)
    print(f"\n{verdict.format(title)}")
    assert verdict.ok, verdict.format(title)
    assert not verdict.lost and not verdict.unexplained
    return verdict
