"""Fault: items that are not tasks among good ones - written by hand with plain boto3, or by an older or newer
version of Punctual.

Every item is decoded on its own. One that a poll cannot read (here: status "pending", lower case) is recorded
FAILED with a detail and leaves the due index; one that only the executor finds unreadable (here: an action
kind nobody registered) is armed with its batch and recorded FAILED by that executor. Neither stops the poll,
nor delays or fails the good tasks of its batch.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from fault_tools import http_tasks, judge, raw_item

from punctual.config.settings import Settings
from punctual.executing.executor import Executor
from punctual.runtime.wiring import poller_on
from punctual_tools.checker import Expected
from punctual_tools.local.dynamodb_local import make_client
from punctual_tools.local.target import TargetServer
from support import RecordingInvoker, create_all, now_ms, one_batch, store_for

pytestmark = pytest.mark.integration


@pytest.mark.timeout(120)
def test_bad_items_in_a_batch_end_failed_with_a_detail_and_the_good_ones_fire(
    settings: Settings,
    target: TargetServer,
    make_executor: Callable[..., Executor],
) -> None:
    # Given 30 good tasks due in ~4 s, and among them (by due time) two hand-written items: one with status
    # "pending" (lower case), one whose action has a kind no one registered
    now = now_ms()
    due = now + 4_000
    tasks = http_tasks("bad-batch", [due + 10 * i for i in range(32)], target.url)
    lower_case, unknown_kind = tasks[10], tasks[21]
    good = [t for t in tasks if t not in (lower_case, unknown_kind)]
    ids = [t.task_id for t in good]
    store = store_for(settings)
    create_all(store, good, created_ms=now)
    client = make_client(settings.endpoint_url)
    for task, change in (
        (lower_case, {"status": {"S": "pending"}}),
        (unknown_kind, {"action": {"S": json.dumps({"kind": "carrier-pigeon", "loft": "n"})}}),
    ):
        client.put_item(TableName=settings.table_name, Item={**store.client.item_of(task, now), **change})
    bad = {lower_case.task_id: lower_case.due_ms, unknown_kind.task_id: unknown_kind.due_ms}

    # When a poll runs, its batch runs on an executor, and the next poll runs
    invoker = RecordingInvoker()
    poller = poller_on(store, invoker, settings)
    first = poller.poll(now_ms())
    event = one_batch(invoker)
    report = make_executor(store_for(settings), settings).run_batch(event)
    second = poller.poll(now_ms())

    # Then the poll went on past the item it could not read (recorded FAILED, out of the index) and dispatched
    # the rest in one batch, the unknown action kind among them
    assert (first.undecodable, first.dispatched) == (1, len(good) + 1)
    assert sorted(t.task_id for t in event.tasks) == sorted([*ids, unknown_kind.task_id])
    # ... the executor armed the batch, recorded the unknown kind FAILED at once, and fired every good task
    assert (report.armed, report.lost_arm, report.fired, report.succeeded) == (len(good), 1, len(good), len(good))
    for task_id in bad:
        item = raw_item(settings, task_id)
        assert item is not None
        assert item["status"]["S"] == "FAILED"
        assert "due_bucket" not in item
        assert item["detail"]["S"].startswith("undecodable item:"), item["detail"]
    # ... nothing is left for the next poll
    assert (second.undecodable, second.dispatched) == (0, 0)
    # ... and the checker agrees: every good task fired once, the bad ones FAILED without a fire
    verdict = judge(
        "bad items in a batch",
        store,
        ids,
        target,
        extra_expected=[Expected(task_id, 0, due_ms, "FAILED") for task_id, due_ms in bad.items()],
    )
    assert len(verdict.matched) == len(good)
    assert len(verdict.failed) == len(bad)
