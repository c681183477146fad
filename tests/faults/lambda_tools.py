"""What the scenarios under Lambda's rules share: the real executor handler (src/executor/app.py) run by the local
invoker in Lambda-profile worker processes (CPU quota, timeout kill, frozen while idle, async retries, throttling,
event age), the limits they run under, and the table's heartbeats.

Lambda's times and a scenario's own run at different speeds: the local invoker multiplies Lambda's retry delays,
throttle backoff and event age by a time scale (and the timeout too with ``scale_timeout``), while arming, waiting
for an instant and firing take real time. A scenario whose point is how Lambda's times relate to each other (a
timeout against its retries and event age) scales them all alike (:func:`scale_to`); the others keep the timeout
and give an event the template's age in real seconds (:func:`executor_limits`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from punctual.config.settings import Settings
from punctual.polling.poller import Poller
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.dynamodb.executors import EXECUTOR_PREFIX
from punctual_tools.local.dynamodb_local import find_project_root, make_client
from punctual_tools.local.invoker import LocalInvoker
from punctual_tools.local.lambda_rules import EXECUTOR_FUNCTION, FunctionLimits, read_function_limits
from punctual_tools.local.stack import executor_env
from support import now_ms, wait_until

HANDLER = find_project_root() / "src" / "executor" / "app.py"
SCALE = 1 / 60  # Lambda's async retries after 1 s and 2 s instead of 1 and 2 minutes; throttle backoff from 17 ms


def process_state(pid: int) -> str | None:
    """The state letter in ``/proc/<pid>/stat`` (R, S, T for stopped, Z...), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


class LambdaExecutors:
    """A :class:`LocalInvoker` of the real executor handler, with these settings and limits, Lambda's times scaled
    by ``time_scale`` (its timeout too with ``scale_timeout``), and the reports its invocations returned."""

    def __init__(
        self,
        home: Path,
        settings: Settings,
        limits: FunctionLimits,
        *,
        max_concurrency: int,
        prewarm: int,
        time_scale: float = SCALE,
        scale_timeout: bool = False,
    ) -> None:
        env = executor_env(settings, environ={})  # the local stack's, without its IAM check or endpoints
        self.log = home / "executor.log"
        self.reports: list[dict[str, Any]] = []
        self.pids: list[int] = []
        self._lock = threading.Lock()
        self.invoker = LocalInvoker(
            HANDLER,
            env,
            log_file=self.log,
            limits=limits,
            profile="lambda",
            max_concurrency=max_concurrency,
            prewarm=prewarm,
            time_scale=time_scale,
            scale_timeout=scale_timeout,
            on_result=self._done,
            on_worker_started=self.pids.append,
        )

    def _done(self, _event: dict[str, Any], result: dict[str, Any]) -> None:
        with self._lock:
            self.reports.append(result)

    def report_of(self, executor_id: str) -> dict[str, Any] | None:
        with self._lock:
            return next((r for r in self.reports if r.get("executor_id") == executor_id), None)

    def warm(self, count: int, timeout: float = 60) -> None:
        """Wait until ``count`` prewarmed workers are through their cold start (frozen, idle)."""
        assert wait_until(
            lambda: sum(process_state(p) == "T" for p in self.invoker.worker_pids()) >= count, timeout=timeout
        ), f"workers not warm\n{self.log_tail()}"

    def log_tail(self, chars: int = 3_000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def close(self) -> None:
        self.invoker.shutdown(timeout=20)
        for pid in self.pids:  # the workers this scenario started, by pid
            if process_state(pid) not in (None, "Z"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGKILL)


def executor_limits(**changes: Any) -> FunctionLimits:
    """The executor's limits from template.yaml (its memory size: its CPU quota), with ``changes``, for a scenario
    run at :data:`SCALE` whose timeout is not scaled: its event age is the template's in real seconds (an event
    may wait as long as in Lambda, however long arming and waiting for an instant take), where the scaled age
    would drop in seconds an event Lambda keeps for minutes."""
    template = read_function_limits(EXECUTOR_FUNCTION)
    return replace(template, **{"max_event_age_s": template.max_event_age_s / SCALE, **changes})


def scale_to(limits: FunctionLimits, timeout_s: float) -> float:
    """The time scale that makes ``limits``' timeout ``timeout_s`` real seconds: applied alike to the timeout, the
    retry delays, the throttle backoff and the event age (``scale_timeout``), it keeps Lambda's proportions."""
    return timeout_s / limits.timeout_s


def heartbeats(settings: Settings) -> dict[str, dict[str, Any]]:
    """Every executor heartbeat item in the table, by executor id."""
    client = make_client(settings.endpoint_url)
    items: dict[str, dict[str, Any]] = {}
    for page in client.get_paginator("scan").paginate(
        TableName=settings.table_name,
        FilterExpression="begins_with(task_id, :p)",
        ExpressionAttributeValues={":p": {"S": EXECUTOR_PREFIX}},
        ConsistentRead=True,
    ):
        for item in page.get("Items", []):
            items[item["task_id"]["S"][len(EXECUTOR_PREFIX) :]] = item
    return items


def all_final(store: DynamoStores, ids: list[str]) -> bool:
    stored = store.client.get_many(ids)
    return len(stored) == len(ids) and all(not t.status.is_active for t in stored.values())


def finish_with_polls(store: DynamoStores, poller: Poller, ids: list[str], timeout: float) -> int:
    """Poll every second (as the scheduled poller would) until every task is final; returns the polls made."""
    polls = 0
    deadline = time.monotonic() + timeout
    while not all_final(store, ids) and time.monotonic() < deadline:
        poller.poll(now_ms())
        polls += 1
        wait_until(lambda: all_final(store, ids), timeout=1.0, interval=0.2)
    return polls
