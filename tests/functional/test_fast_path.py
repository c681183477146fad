"""The fast path and the poll on moto: what the fast path leaves to the next poll, that poll dispatches in time.

Each poll notes when it starts on its group's watermark item; the fast path reads that once per stream batch and
leaves to the next poll every task that poll dispatches at least the fast-path margin before it is due. Times are
explicit: a poll at ``now_ms`` (20 s into a minute), the default 60 s interval, 90 s lead and 10 s margin.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from moto_table import raw_item
from punctual.config.settings import Settings
from punctual.domain.model import TaskStatus
from punctual.polling.fastpath import dispatch_stream_records
from punctual.polling.poller import Poller
from punctual.runtime.wiring import decode_stream_image, poller_on
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.dynamodb.due import DueIndex
from support import RecordingInvoker, TaskFactory, read_task, with_part


def stream_batch(dynamodb: Any, *task_ids: str) -> list[dict[str, Any]]:
    """The stream records of the tasks' writes (NEW_IMAGE), as the event filter passes them."""
    return [
        {"eventName": "INSERT", "eventID": str(n), "dynamodb": {"NewImage": raw_item(dynamodb, t)}}
        for n, t in enumerate(task_ids)
    ]


@pytest.fixture
def store(dynamodb: Any, settings: Settings) -> DynamoStores:
    return DynamoStores.from_settings(dynamodb, settings)


@pytest.fixture
def fast_invoker() -> RecordingInvoker:
    return RecordingInvoker()


@pytest.fixture
def fast_path(dynamodb: Any, fast_invoker: RecordingInvoker, settings: Settings) -> Poller:
    return poller_on(DynamoStores.from_settings(dynamodb, settings), fast_invoker, settings, poller_id="fast-test")


def test_a_task_left_to_the_poll_is_dispatched_by_the_next_poll_before_it_is_due(
    dynamodb: Any,
    store: DynamoStores,
    poller: Poller,
    fast_path: Poller,
    tasks: TaskFactory,
    invoker: RecordingInvoker,
    fast_invoker: RecordingInvoker,
    settings: Settings,
    now_ms: int,
) -> None:
    # Given a poll that started at now_ms (nothing due yet)
    assert poller.poll(now_ms).dispatched == 0
    # And, 20 s later, two tasks written with short leads (both flagged for the fast path): one due 65 s ahead,
    # 15 s after the next poll is expected, and one due 2 s ahead
    written = now_ms + 20_000
    later = tasks.create(written + 65_000, "left-to-the-poll", now_ms=written)
    soon = tasks.create(written + 2_000, "due-soon", now_ms=written)
    assert raw_item(dynamodb, later.task_id)["fast_path"]["N"] == raw_item(dynamodb, soon.task_id)["fast_path"]["N"]
    # When their stream records reach the fast path half a second later
    report = dispatch_stream_records(
        fast_path, stream_batch(dynamodb, later.task_id, soon.task_id), written + 500, decode=decode_stream_image
    )
    # Then it knows when the last poll started, dispatches the task due soon and leaves the other to the poll
    assert report.polls_known
    assert (report.candidates, report.dispatched, report.left_to_poll) == (2, 1, 1)
    assert fast_invoker.task_ids == [soon.task_id]
    # When the next poll comes, on time
    next_poll = now_ms + settings.poll_interval_ms
    poller.poll(next_poll)
    # Then it dispatches the task left to it, at least the fast-path margin before it is due, still PENDING (and
    # the other once more, since no executor armed it here)
    assert sorted(invoker.task_ids) == sorted([later.task_id, soon.task_id])
    assert later.due_ms - next_poll >= settings.fast_path_margin_ms
    assert read_task(store, later.task_id).status is TaskStatus.PENDING


def test_a_task_left_to_the_poll_is_found_by_a_poll_that_comes_after_it_was_due(
    dynamodb: Any,
    poller: Poller,
    fast_path: Poller,
    tasks: TaskFactory,
    invoker: RecordingInvoker,
    now_ms: int,
) -> None:
    # Given a poll at now_ms, and a task written 20 s later due 65 s ahead, which the fast path leaves to the poll
    poller.poll(now_ms)
    written = now_ms + 20_000
    later = tasks.create(written + 65_000, "left-to-a-late-poll", now_ms=written)
    assert (
        dispatch_stream_records(
            fast_path, stream_batch(dynamodb, later.task_id), written + 500, decode=decode_stream_image
        ).left_to_poll
        == 1
    )
    # When the next poll is missed and the one after comes after the task was due
    report = poller.poll(now_ms + 120_000)
    # Then that poll finds it overdue and dispatches it (its executor fires it within its grace, or records it
    # MISSED): late, not lost
    assert report.dispatched == 1
    assert invoker.task_ids == [later.task_id]


def test_without_a_noted_poll_the_fast_path_dispatches_every_candidate(
    dynamodb: Any,
    fast_path: Poller,
    tasks: TaskFactory,
    fast_invoker: RecordingInvoker,
    now_ms: int,
) -> None:
    # Given no poll has run yet, and a task written due 65 s ahead
    task = tasks.create(now_ms + 65_000, "no-poll-yet", now_ms=now_ms)
    # When its record reaches the fast path
    report = dispatch_stream_records(
        fast_path, stream_batch(dynamodb, task.task_id), now_ms + 500, decode=decode_stream_image
    )
    # Then it dispatches it: it cannot tell when the next poll comes
    assert not report.polls_known
    assert (report.dispatched, report.left_to_poll) == (1, 0)
    assert fast_invoker.task_ids == [task.task_id]


def test_close_to_the_next_poll_the_fast_path_dispatches_every_candidate(
    dynamodb: Any,
    poller: Poller,
    fast_path: Poller,
    tasks: TaskFactory,
    fast_invoker: RecordingInvoker,
    settings: Settings,
    now_ms: int,
) -> None:
    # Given a poll at now_ms, and a task written 1 ms less than the margin before the next poll, due 65 s ahead
    poller.poll(now_ms)
    written = now_ms + settings.poll_interval_ms - settings.fast_path_margin_ms + 1
    task = tasks.create(written + 65_000, "close-to-the-poll", now_ms=written)
    # When its record reaches the fast path at once
    report = dispatch_stream_records(
        fast_path, stream_batch(dynamodb, task.task_id), written, decode=decode_stream_image
    )
    # Then it dispatches it: a poll that starts a little early might read the index before the write
    assert (report.dispatched, report.left_to_poll) == (1, 0)
    assert fast_invoker.task_ids == [task.task_id]


class UnreadablePolls(DueIndex):
    def last_polls(self) -> list[int | None]:
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "BatchGetItem")


def test_when_the_last_polls_cannot_be_read_the_fast_path_dispatches_every_candidate(
    dynamodb: Any,
    poller: Poller,
    tasks: TaskFactory,
    settings: Settings,
    now_ms: int,
) -> None:
    # Given a poll at now_ms, and a task written 20 s later due 65 s ahead (the poll's, were its start readable)
    poller.poll(now_ms)
    written = now_ms + 20_000
    task = tasks.create(written + 65_000, "unreadable-polls", now_ms=written)
    invoker = RecordingInvoker()
    fast_path = poller_on(
        with_part(DynamoStores.from_settings(dynamodb, settings), UnreadablePolls),
        invoker,
        settings,
        poller_id="fast-test",
    )
    # When its record reaches a fast path that cannot read when the last polls started
    report = dispatch_stream_records(
        fast_path, stream_batch(dynamodb, task.task_id), written + 500, decode=decode_stream_image
    )
    # Then it dispatches it, as if no poll were coming
    assert not report.polls_known
    assert report.dispatched == 1
    assert invoker.task_ids == [task.task_id]


def test_a_poll_notes_its_start_on_its_groups_watermark_item_and_never_moves_it_back(
    dynamodb: Any,
    settings: Settings,
    now_ms: int,
) -> None:
    # Given two poll groups and no poll yet
    store = DynamoStores.from_settings(dynamodb, settings.model_copy(update={"poll_groups": 2}))
    assert store.dispatch.last_polls() == [None, None]
    # When group 1 notes a start, then an earlier one
    assert store.dispatch.mark_polled(now_ms, group=1)
    assert not store.dispatch.mark_polled(now_ms - 1, group=1)
    # Then only group 1's start is known, the later one, and the group has no watermark yet
    assert store.dispatch.last_polls() == [None, now_ms]
    assert store.dispatch.get_watermark(1) is None
    # And a poll of group 0 notes its own start, next to the watermark it moves
    poller_on(store, RecordingInvoker(), settings.model_copy(update={"poll_groups": 2})).poll(now_ms + 1, group=0)
    assert store.dispatch.last_polls() == [now_ms + 1, now_ms]
    assert store.dispatch.get_watermark(0) is not None
