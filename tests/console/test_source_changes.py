"""The operator source's changes and the other pages on DynamoDB Local: cancel, reschedule and run-now through the
client (its errors unchanged), schedules and their occurrences, the dead-letter queue joined with the table and a
redrive that changes both, and the tenants' quota use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from punctual.domain.model import TaskStatus
from punctual.domain.schedules import ScheduleState
from punctual.errors import InvalidTaskError, PunctualError, ScheduleNotFoundError, TaskNotFoundError, TaskStateError
from punctual.scheduling.client import Client
from punctual.scheduling.protocol import ScheduleSpec
from punctual.stores.dlq import FileDeadLetterQueue
from punctual.stores.dynamodb import DynamoStores
from punctual.targets import LogAction
from punctual_tools.console.source import OperatorSource, local_source
from support import TaskFactory, make_failed, read_task

pytestmark = pytest.mark.integration  # on the session's DynamoDB Local


def test_cancel_reschedule_and_run_now_change_the_table(
    operator: OperatorSource, stores: DynamoStores, tasks: TaskFactory, now: int
) -> None:
    # Given three pending tasks due in ten minutes
    one, two, three = (tasks.create(now + 600_000, now_ms=now) for _ in range(3))
    # When the console cancels the first, moves the second a minute on and runs the third now
    operator.cancel(one.task_id)
    moved = operator.reschedule(two.task_id, now + 660_000)
    ran = operator.run_now(three.task_id)
    # Then the table says so
    assert read_task(stores, one.task_id).status is TaskStatus.CANCELLED
    assert read_task(stores, two.task_id).due_ms == moved.due_ms == now + 660_000
    assert ran.due_ms <= now + 60_000
    assert operator.task(three.task_id) == read_task(stores, three.task_id)
    # And a refused change raises the client's own errors, the task as it is with them
    with pytest.raises(TaskStateError) as refused:
        operator.cancel(one.task_id)
    assert refused.value.task is not None
    with pytest.raises(TaskNotFoundError):
        operator.run_now("no-such-task")
    with pytest.raises(InvalidTaskError):
        operator.reschedule(two.task_id, now + 400 * 86_400_000)  # past the horizon
    assert operator.task("no-such-task") is None


def test_schedules_their_occurrences_and_their_changes(
    operator: OperatorSource, scene_client: Client, now: int
) -> None:
    # Given a schedule firing every minute
    scene_client.submit_schedule(
        ScheduleSpec(schedule_id="every-minute", expression="rate(1 minute)", action=LogAction())
    )
    # When the console lists it and its occurrences
    listed = [s.schedule_id for s in operator.schedules()]
    occurrences = operator.occurrences("every-minute", limit=2)
    # Then it is there, and its latest two occurrences come newest first, each as stored
    assert "every-minute" in listed
    assert len(occurrences) == 2
    assert occurrences[0].due_ms > occurrences[1].due_ms
    assert all(t.task_id.startswith("every-minute@") for t in occurrences)
    # And run-now adds one more due now; pause, resume and delete change its state
    extra = operator.run_schedule_now("every-minute")
    assert extra.due_ms <= operator.client.now_ms()
    assert operator.pause_schedule("every-minute").state is ScheduleState.PAUSED
    assert operator.resume_schedule("every-minute").state is ScheduleState.ACTIVE
    assert operator.delete_schedule("every-minute").state is ScheduleState.DELETED
    with pytest.raises(ScheduleNotFoundError):
        operator.run_schedule_now("every-minute")
    assert operator.schedule("no-such-schedule") is None


def test_dead_letters_are_joined_with_the_table_and_a_redrive_changes_both(
    operator: OperatorSource, stores: DynamoStores, tasks: TaskFactory, queue: FileDeadLetterQueue, now: int
) -> None:
    # Given two FAILED tasks with their dead letters (the first failed twice: two letters), and a letter whose task
    # is gone
    first = make_failed(stores, tasks, "broken-1", now)
    second = make_failed(stores, tasks, "broken-2", now)
    queue.send(first, "boom (attempt 1)")
    queue.send(first, "boom (attempt 2)")
    queue.send(second, "refused")
    gone = tasks.build(now + 1_000, "gone")
    queue.send(gone, "expired since")
    # When the console looks at the dead letters
    letters = {letter.task_id: letter for letter in operator.dead_letters()}
    # Then each task comes once, with its newest reason and as stored now; the gone one without a task
    assert set(letters) == {"broken-1", "broken-2", "gone"}
    assert letters["broken-1"].reason == "boom (attempt 2)"
    assert letters["broken-2"].task == read_task(stores, "broken-2")
    assert letters["gone"].task is None
    # And looking hid nothing: the queue still holds every letter
    assert len(queue.receive()) == 4
    # When the first is redriven along with a task that is not FAILED and one that does not exist
    pending = tasks.create(now + 60_000, now_ms=now)
    outcome = operator.redrive(["broken-1", pending.task_id, "nowhere"])
    # Then the first is PENDING again and its letters are gone; the others are skipped, each with why
    assert outcome.redriven == ["broken-1"]
    assert outcome.skipped == {pending.task_id: "not FAILED", "nowhere": "not found"}
    assert read_task(stores, "broken-1").status is TaskStatus.PENDING
    assert {letter.task_id for letter in queue.receive()} == {"broken-2", "gone"}


def test_tenants_show_their_active_tasks_and_schedules_against_their_quotas(
    operator: OperatorSource, scene_client: Client, tasks: TaskFactory, now: int
) -> None:
    # Given acme with two active tasks, a finished one and a schedule; beta with one task; local with nothing
    for i in range(2):
        tasks.create(now + 60_000, f"acme/t-{i}", now_ms=now)
    operator.cancel(tasks.create(now + 60_000, "acme/t-done", now_ms=now).task_id)
    scene_client.submit_schedule(ScheduleSpec(schedule_id="acme/hourly", expression="rate(1 hour)", action=LogAction()))
    tasks.create(now + 60_000, "beta/t-0", now_ms=now)
    # When the Tenants page is read
    usage = {u.tenant: u for u in operator.tenants()}
    # Then each tenant the stack serves is there, its use against the quotas of the tenant map (acme's its own)
    assert set(usage) == {"local", "acme", "beta"}
    acme = usage["acme"]
    assert acme.active_tasks is not None  # counted: the source was told to wait for it
    assert acme.active_tasks >= 2  # the schedule's first occurrences are active tasks of acme's too
    assert (acme.active_tasks_limit, acme.schedules, acme.schedules_limit) == (10, 1, 3)
    assert acme.schedule_rate_per_s == pytest.approx(1 / 3600, rel=0.01)
    assert (usage["beta"].active_tasks, usage["beta"].schedules, usage["beta"].active_tasks_limit) == (1, 0, 100_000)
    assert usage["local"].active_tasks == 0


def test_no_source_without_a_running_stack(home: Path) -> None:
    # Given the state file a killed stack left (its process gone)
    state = json.loads((home / "stack.json").read_text())
    (home / "stack.json").write_text(json.dumps({**state, "pid": 0}))
    # When the console looks for the stack, then it is told none runs
    with pytest.raises(PunctualError, match="no local stack is running"):
        local_source(home)
