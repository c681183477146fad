"""Fault: Lambda's async invoke delivers at least once - the same batch reaches two executors, or one twice.

The ARM condition (``status = PENDING`` at the due time the batch carries) lets exactly one executor arm each
task; the other loses at arm and fires nothing - and cannot take it over either, as the winner's heartbeat is
alive (and once the winner has recorded, the task is no longer ARMED at all). Observed at the loopback target:
every task fires once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from fault_tools import http_tasks, judge

from punctual.config.settings import Settings
from punctual.domain.keys import from_ms
from punctual.domain.model import TaskStatus
from punctual.runtime.client import Client
from punctual.runtime.wiring import poller_on
from punctual.targets import HttpAction
from punctual_tools.local.stack import LocalStack, StackConfig
from punctual_tools.local.target import TargetServer
from support import RecordingInvoker, create_all, now_ms, one_batch, run_threads, store_for, wait_until

pytestmark = pytest.mark.integration


@pytest.mark.timeout(120)
@pytest.mark.parametrize("write_batch", ["single", "transaction"])
def test_a_batch_delivered_to_two_executors_at_once_and_a_third_later_fires_each_task_once(
    write_batch: str,
    make_settings: Callable[..., Settings],
    target: TargetServer,
    make_executor: Callable[..., Any],
) -> None:
    # Given 30 tasks due in ~2.5 s, dispatched by one poll in one batch
    settings = make_settings(write_batch=write_batch)
    store = store_for(settings)
    due = now_ms() + 2_500
    tasks = http_tasks(f"dup-{write_batch}", [due + 7 * (i % 5) for i in range(30)], target.url)
    create_all(store, tasks)
    invoker = RecordingInvoker()
    poller_on(store, invoker, settings).poll(now_ms())
    event = one_batch(invoker)
    assert len(event.tasks) == len(tasks)

    # When two executors (two Lambda environments) get that batch at the same time
    executors = [make_executor(store_for(settings), settings) for _ in range(2)]
    reports = run_threads([partial(x.run_batch, event) for x in executors])
    # ... and the same batch is delivered once more, after they finished (a retried invocation)
    late_report = make_executor(store_for(settings), settings).run_batch(event)

    # Then each task was armed by exactly one of the first two, and the late delivery armed none
    assert sum(r.armed for r in reports) == len(tasks)
    assert sum(r.lost_arm for r in reports) == len(tasks)
    assert (late_report.armed, late_report.lost_arm) == (0, len(tasks))
    # ... and the target saw each task fire once: 0 lost, 0 extra
    verdict = judge(
        f"duplicate delivery to two executors + a late retry ({write_batch})", store, [t.task_id for t in tasks], target
    )
    assert len(verdict.matched) == len(tasks)
    assert not verdict.extra


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_the_local_runtime_delivering_every_invocation_twice_fires_each_task_once(
    tmp_path: Path, target: TargetServer
) -> None:
    # Given the local runtime whose invoker delivers every executor invocation twice (duplicate_rate 1.0),
    # polling every 2 s, with no fast path (so that every task goes through a poll and a doubled invocation)
    config = StackConfig(
        home=tmp_path,
        port=0,
        in_memory=True,
        poll_interval_s=2,
        prewarm=2,
        duplicate_rate=1.0,
        fast_path=False,
        settings_overrides={
            "table_name": f"faults-{uuid.uuid4().hex[:8]}",
            "ntp_server": None,
            "allowed_targets": "127.0.0.1",
        },
    )
    with LocalStack(config) as stack:
        assert stack.settings is not None
        assert stack.invoker is not None
        client = Client(stack.settings)
        # When 40 tasks are scheduled, due 5-6 s from now (with a grace of minutes: a slow machine only makes
        # them late)
        start = now_ms() + 5_000
        ids = [
            client.schedule(
                from_ms(start + 25 * i),
                HttpAction(url=target.url, timeout_s=5),
                {"i": i},
                task_id=f"twice-{i:03d}",
                misfire_grace=300_000,
            ).task_id
            for i in range(40)
        ]
        store = store_for(stack.settings)
        fired = target.wait_for_keys([f"{task_id}:0" for task_id in ids], timeout=40)
        finished = wait_until(
            lambda: all(t.status is TaskStatus.SUCCEEDED for t in store.client.get_many(ids).values()), timeout=20
        )
        # (once every delivery has completed, every fire it made has reached the target: an action's POST is
        # answered before its executor records it and returns)
        assert stack.invoker.wait_idle(30)
        stats = dict(stack.invoker.stats)

        # Then every invocation ran twice (each doubled delivery completed) ...
        assert fired
        assert finished
        assert stats["invoked"] >= 1
        assert stats["completed"] == 2 * stats["invoked"]
        # ... and the target saw each task fire once
        judge("local runtime, every invocation delivered twice", store, ids, target)
