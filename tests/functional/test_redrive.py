"""The redrive service on moto: which tasks go back to PENDING, which are skipped and why, and the dead letters
it settles; the client's redrive over it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.domain.model import Task, TaskStatus
from punctual.errors import TaskStateError
from punctual.scheduling.client import Client
from punctual.scheduling.redrive import RedriveReport, Selection, Skipped, SkipReason, redrive_tasks
from punctual.stores.dlq import FileDeadLetterQueue
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.ports import ClientPort
from support import make_failed, read_task


class RivalFirst:
    """The store as another caller races it: just before each REDRIVE write, the rival redrives the same tasks at
    ``rival_ms``, so every write of the service loses."""

    def __init__(self, store: ClientPort, rival_ms: int) -> None:
        self._store = store
        self.rival_ms = rival_ms

    def redrive_many(self, task_ids: list[str], now_ms: int) -> list[bool]:
        assert self._store.redrive_many(task_ids, self.rival_ms) == [True] * len(task_ids)
        return self._store.redrive_many(task_ids, now_ms)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_named_failed_tasks_are_redriven_and_each_other_one_is_skipped_with_its_reason(
    store: DynamoStores, tasks: Any, now_ms: int
) -> None:
    # Given two FAILED tasks, a PENDING one, and an id with no task
    make_failed(store, tasks, "f1", now_ms)
    make_failed(store, tasks, "f2", now_ms)
    tasks.create(now_ms + 5_000, "p1")
    later = now_ms + 60_000
    # When all of them are redriven (f1 named twice)
    report = redrive_tasks(store.client, Selection.of(["f1", "p1", "nope", "f2", "f1"]), later)
    # Then the FAILED ones are redriven, in the order named, each once; the others are skipped and say why
    assert report.redriven == ("f1", "f2")
    assert [(s.task_id, s.reason, s.status) for s in report.skipped] == [
        ("p1", SkipReason.NOT_FAILED, TaskStatus.PENDING),
        ("nope", SkipReason.NOT_FOUND, None),
    ]
    assert report.counts == {
        "redriven": 2,
        "not found": 1,
        "not FAILED": 1,
        "lost the race": 0,
        "over its tenant's quota": 0,
    }
    assert report.dead_letters_removed is None
    # And the redriven ones are PENDING, due at the instant given, with their attempts afresh; p1 is untouched
    for task_id in ("f1", "f2"):
        back = read_task(store, task_id)
        assert (back.status, back.due_ms, back.attempt) == (TaskStatus.PENDING, later, 0)
    assert read_task(store, "p1").due_ms == now_ms + 5_000


def test_a_second_redrive_skips_what_the_first_redrove(store: DynamoStores, tasks: Any, now_ms: int) -> None:
    # Given a FAILED task redriven once
    make_failed(store, tasks, "f1", now_ms)
    assert redrive_tasks(store.client, Selection.of(["f1"]), now_ms + 10).redriven == ("f1",)
    # When it is redriven again
    report = redrive_tasks(store.client, Selection.of(["f1"]), now_ms + 20)
    # Then it is skipped as not FAILED, and its due time is the first redrive's
    assert report == RedriveReport(
        skipped=(Skipped(task_id="f1", reason=SkipReason.NOT_FAILED, task=read_task(store, "f1")),)
    )
    assert read_task(store, "f1").due_ms == now_ms + 10


def test_a_task_another_caller_redrove_first_lost_the_race(store: DynamoStores, tasks: Any, now_ms: int) -> None:
    # Given a FAILED task, and a rival that redrives it between the service's read and its write
    make_failed(store, tasks, "f1", now_ms)
    rival = RivalFirst(store.client, rival_ms=now_ms + 5)
    # When the service redrives it
    report = redrive_tasks(rival, Selection.of(["f1"]), now_ms + 10)
    # Then it lost the race: skipped with the task as it is now (the rival's redrive), which stands
    (skipped,) = report.skipped
    assert (skipped.task_id, skipped.reason, skipped.status) == ("f1", SkipReason.LOST_RACE, TaskStatus.PENDING)
    assert report.redriven == ()
    assert report.counts["lost the race"] == 1
    assert read_task(store, "f1").due_ms == now_ms + 5


def test_every_failed_task_is_selected_and_nothing_else(store: DynamoStores, tasks: Any, now_ms: int) -> None:
    # Given two FAILED tasks and a PENDING one
    make_failed(store, tasks, "f1", now_ms)
    make_failed(store, tasks, "f2", now_ms)
    tasks.create(now_ms + 5_000, "p1")
    # When every FAILED task is redriven
    report = redrive_tasks(store.client, Selection(failed=True), now_ms + 60_000)
    # Then those two are, and nothing was skipped
    assert sorted(report.redriven) == ["f1", "f2"]
    assert report.skipped == ()
    assert read_task(store, "p1").status is TaskStatus.PENDING


def test_what_the_queue_holds_is_redriven_and_its_settled_letters_removed(
    store: DynamoStores, tasks: Any, now_ms: int, tmp_path: Path
) -> None:
    # Given letters for a FAILED task, a task redriven earlier (stale), a task that is gone, and a FAILED task
    # with no letter
    queue = FileDeadLetterQueue(tmp_path / "dlq.jsonl")
    for task_id in ("a", "s"):
        queue.send(make_failed(store, tasks, task_id, now_ms), "boom")
    assert store.client.redrive_many(["s"], now_ms + 5) == [True]
    queue.send(Task(task_id="gone", due_at="2030-06-01T12:00:00Z", action={"kind": "log"}), "boom")
    make_failed(store, tasks, "b", now_ms)
    # When what the queue holds is redriven
    report = redrive_tasks(store.client, Selection(dead_lettered=True), now_ms + 60_000, queue)
    # Then a is redriven, s and gone are skipped, b is not selected; every letter is settled and removed
    assert report.redriven == ("a",)
    assert [(s.task_id, s.reason) for s in report.skipped] == [
        ("s", SkipReason.NOT_FAILED),
        ("gone", SkipReason.NOT_FOUND),
    ]
    assert report.dead_letters_removed == 3
    assert queue.receive() == []
    assert read_task(store, "b").status is TaskStatus.FAILED


def test_letters_of_tasks_still_failed_stay_and_those_of_a_lost_race_go(
    store: DynamoStores, tasks: Any, now_ms: int, tmp_path: Path
) -> None:
    # Given dead-lettered FAILED tasks a and b, and a rival that redrives whatever the service writes first
    queue = FileDeadLetterQueue(tmp_path / "dlq.jsonl")
    for task_id in ("a", "b"):
        queue.send(make_failed(store, tasks, task_id, now_ms), "boom")
    rival = RivalFirst(store.client, rival_ms=now_ms + 5)
    # When only a is redriven, and loses the race
    report = redrive_tasks(rival, Selection.of(["a"]), now_ms + 10, queue)
    # Then a's letter is removed (it is no longer FAILED), b's stays with b FAILED
    assert [s.reason for s in report.skipped] == [SkipReason.LOST_RACE]
    assert report.dead_letters_removed == 1
    assert [letter.task_id for letter in queue.receive()] == ["b"]


def test_nothing_selected_is_an_empty_report(store: DynamoStores, tmp_path: Path, now_ms: int) -> None:
    queue = FileDeadLetterQueue(tmp_path / "dlq.jsonl")
    assert redrive_tasks(store.client, Selection.everything(), now_ms, queue) == RedriveReport(dead_letters_removed=0)


def test_the_client_refuses_a_redrive_that_lost_the_race_with_the_task_as_it_is(
    store: DynamoStores, tasks: Any, settings: Settings, now_ms: int
) -> None:
    # Given a FAILED task and a client over a store a rival redrives first
    make_failed(store, tasks, "f1", now_ms)
    client = Client(settings, RivalFirst(store.client, rival_ms=now_ms + 5), store.schedules)
    # When the client redrives it  Then it is refused, naming the task as the rival left it
    with pytest.raises(TaskStateError) as refused:
        client.redrive("f1")
    assert refused.value.task.status is TaskStatus.PENDING
    assert "not FAILED" in str(refused.value)
