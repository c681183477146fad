"""The dead-letter queue (SQS on moto, and the local JSON-lines file), the executor sending to it after the FAILED
record, the REDRIVE write, and ``punctual redrive`` in-process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from punctual.config.settings import Settings
from punctual.domain.clock import SystemClock
from punctual.domain.keys import index_key, shard_of
from punctual.domain.model import Task, TaskStatus
from punctual.domain.retry import RetryPolicy
from punctual.scheduling.redrive import RedriveReport, Skipped, SkipReason
from punctual.stores.dlq import FileDeadLetterQueue, SqsDeadLetterQueue, build_dead_letter_queue, file_queue_url
from punctual.stores.dynamodb import DynamoStores
from punctual.targets import HttpAction
from punctual_tools.cli import main
from punctual_tools.cli.maintenance import redrive_lines
from support import StubTarget, executor_on, make_failed, read_task, run_until_done, serving

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

TABLE = "punctual-tasks-test"  # the functional conftest's table


@pytest.fixture
def failing_url() -> Iterator[str]:
    """The URL of a target that answers every POST with 500."""
    with serving(StubTarget()) as target:
        yield target.url()


@pytest.fixture
def sqs(dynamodb: Any) -> SQSClient:  # inside the same moto context as the table
    return boto3.client("sqs", region_name="us-east-1")


@pytest.fixture
def queue_url(sqs: SQSClient) -> str:
    return sqs.create_queue(QueueName="punctual-dlq")["QueueUrl"]


# -- the queues ----------------------------------------------------------------------------------------------
def test_file_queue_appends_receives_and_acknowledges_exactly_what_it_read(tmp_path: Path) -> None:
    # Given a file queue with two dead letters
    queue = FileDeadLetterQueue(tmp_path / "dlq.jsonl")
    task = Task(task_id="t1", due_at="2030-06-01T12:00:00Z", action={"kind": "log"}, attempt=3, occurrence=2)
    queue.send(task, "HTTP 500")
    queue.send(task.model_copy(update={"task_id": "t2"}), "timeout")
    # When they are read, a third arrives, and the first read is acknowledged
    letters = queue.receive()
    queue.send(task, "HTTP 500 again")
    removed = queue.acknowledge(letters)
    # Then the messages held task id, occurrence, attempt, reason and failure time; only the two read are gone
    assert [(m.task_id, m.occurrence, m.attempt, m.reason) for m in letters] == [
        ("t1", 2, 3, "HTTP 500"),
        ("t2", 2, 3, "timeout"),
    ]
    assert all(m.failed_at for m in letters)
    assert removed == 2
    (left,) = queue.receive()
    assert left.reason == "HTTP 500 again"
    # And no temporary file is left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dlq.jsonl", "dlq.jsonl.lock"]


def test_sqs_queue_sends_json_and_deletes_what_is_acknowledged(sqs: Any, queue_url: str) -> None:
    # Given an SQS queue with two dead letters
    queue = SqsDeadLetterQueue(sqs, queue_url, visibility_timeout_s=30)
    task = Task(task_id="t1", due_at="2030-06-01T12:00:00Z", action={"kind": "log"}, attempt=1)
    queue.send(task, "HTTP 500")
    queue.send(task.model_copy(update={"task_id": "t2"}), "HTTP 503")
    # When both are received, one acknowledged and the other released
    letters = {m.task_id: m for m in queue.receive()}
    assert set(letters) == {"t1", "t2"}
    assert queue.acknowledge([letters["t1"]]) == 1
    queue.release([letters["t2"]])
    # Then only the released one can be received again, with its JSON body intact
    (again,) = queue.receive()
    assert (again.task_id, again.attempt, again.reason) == ("t2", 1, "HTTP 503")


def test_the_queue_is_the_one_the_url_names(tmp_path: Path, sqs: Any, queue_url: str) -> None:
    # Given an SQS queue URL, a file URL (its path with a space, so percent-encoded), and no URL
    path = tmp_path / "dead letters" / "dlq.jsonl"
    # When each builds the dead-letter queue  Then it is SQS, the very file, and none
    assert isinstance(build_dead_letter_queue(Settings(dead_letter_queue_url=queue_url), sqs), SqsDeadLetterQueue)
    local = build_dead_letter_queue(Settings(dead_letter_queue_url=file_queue_url(path)))
    assert isinstance(local, FileDeadLetterQueue)
    assert local.path == path
    assert build_dead_letter_queue(Settings()) is None


# -- the executor --------------------------------------------------------------------------------------------
def test_a_task_that_spends_its_attempts_is_failed_then_dead_lettered(
    store: DynamoStores, tasks: Any, settings: Settings, tmp_path: Path, failing_url: str
) -> None:
    # Given an executor with a file dead-letter queue, and a task that always fails, with two attempts
    queue = FileDeadLetterQueue(tmp_path / "dlq.jsonl")
    executor = executor_on(store, settings, dead_letters=queue)
    now = int(SystemClock().wall_ms())
    task = tasks.create(
        now + 300,
        "poison",
        now_ms=now,
        action=HttpAction(url=failing_url, timeout_s=5, retry_transient=False),
        retry=RetryPolicy(max_attempts=2, backoff_ms=20),
    )
    # When it runs until finished
    reports = run_until_done(store, settings, executor, task.task_id)
    # Then it is FAILED and exactly one dead letter was sent, after the last attempt, saying why
    assert read_task(store, task.task_id).status is TaskStatus.FAILED
    assert [r.dead_lettered for r in reports] == [0, 1]
    (letter,) = queue.receive()
    assert (letter.task_id, letter.occurrence, letter.attempt) == ("poison", 0, 2)
    assert "HTTP 500" in letter.reason
    assert "no retry left" in letter.reason


def test_a_failed_send_leaves_the_task_failed_in_the_table(
    store: DynamoStores, tasks: Any, settings: Settings, failing_url: str
) -> None:
    # Given a dead-letter queue that is down
    class Down:
        def send(self, task: Task, reason: str) -> None:
            raise ConnectionError("queue unreachable")

    executor = executor_on(store, settings, dead_letters=Down())
    now = int(SystemClock().wall_ms())
    task = tasks.create(
        now + 300, "lonely", now_ms=now, action=HttpAction(url=failing_url, timeout_s=5, retry_transient=False)
    )
    # When the task fails / Then the batch completes, the task is FAILED (redrive --all finds it in the table)
    (report,) = run_until_done(store, settings, executor, task.task_id)
    assert (report.failed, report.dead_lettered) == (1, 0)
    assert read_task(store, task.task_id).status is TaskStatus.FAILED


# -- the REDRIVE write ---------------------------------------------------------------------------------------
def test_redrive_puts_a_failed_task_back_to_pending_due_now_once(
    store: DynamoStores, tasks: Any, read_raw: Any, now_ms: int
) -> None:
    # Given a FAILED task, and a SUCCEEDED-never-failed one (still PENDING)
    failed = make_failed(store, tasks, "f1", now_ms)
    assert failed.attempt == 1
    assert read_raw("f1").get("expires_at") is not None
    pending = tasks.create(now_ms + 5_000, "p1")
    later = now_ms + 60_000
    # When both are redriven
    assert store.client.redrive_many(["f1", "p1", "nope"], later) == [True, False, False]
    # Then the FAILED one is PENDING, due now, attempts afresh, back in the due index, flagged for the fast path,
    # with no TTL; the others are untouched
    back, raw = read_task(store, "f1"), read_raw("f1")
    assert back.status is TaskStatus.PENDING
    assert back.due_ms == later
    assert back.attempt == 0
    assert raw["due_bucket"]["S"] == index_key(later, shard_of("f1", store.config.shard_count))
    assert raw["fast_path"] == {"N": "1"}
    assert "expires_at" not in raw
    assert back.finished_at is None
    assert back.armed_by is None
    assert read_task(store, "p1") == pending.model_copy(update={"created_at": read_task(store, "p1").created_at})
    # And a second redrive is a no-op
    assert store.client.redrive_many(["f1"], later + 1) == [False]
    assert read_task(store, "f1").due_ms == later


# -- punctual redrive ----------------------------------------------------------------------------------------
@pytest.fixture
def local_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home whose state file points the CLI at the moto table (endpoint None: AWS, i.e. moto)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "stack.json").write_text(
        json.dumps(
            {
                "endpoint_url": None,
                "table_name": TABLE,
                "shard_count": 4,
                "dead_letter_queue_url": file_queue_url(home / "dlq.jsonl"),
            }
        )
    )
    monkeypatch.setenv("PUNCTUAL_REGION", "us-east-1")
    return home


def test_cli_redrives_every_failed_task_and_empties_the_local_queue(
    store: DynamoStores, tasks: Any, local_home: Path, now_ms: int, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given two FAILED tasks with dead letters, and one FAILED task whose letter was never sent
    queue = FileDeadLetterQueue(local_home / "dlq.jsonl")
    for task_id in ("a", "b"):
        queue.send(make_failed(store, tasks, task_id, now_ms), "boom")
    make_failed(store, tasks, "c", now_ms)
    # When `punctual redrive --all` runs
    assert main(["--home", str(local_home), "redrive", "--all"]) == 0
    # Then all three are PENDING, the queue is empty, and the counts are printed
    assert {read_task(store, t).status for t in "abc"} == {TaskStatus.PENDING}
    assert queue.receive() == []
    out = capsys.readouterr().out
    assert "redrive: 3 task(s) redriven, 0 unchanged; 2 dead letter(s) removed" in out
    # And running it again by id is a no-op that says so
    assert main(["--home", str(local_home), "redrive", "a"]) == 0
    out = capsys.readouterr().out
    assert "a: PENDING, not FAILED: nothing to do" in out
    assert "redrive: 0 task(s) redriven, 1 unchanged; 0 dead letter(s) removed" in out
    assert read_task(store, "a").status is TaskStatus.PENDING


def test_cli_redrive_by_id_leaves_other_letters_and_removes_stale_ones(
    store: DynamoStores, tasks: Any, local_home: Path, now_ms: int, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given FAILED tasks a and b with letters, and a stale letter for s (redriven earlier, its letter left)
    queue = FileDeadLetterQueue(local_home / "dlq.jsonl")
    for task_id in ("a", "b", "s"):
        queue.send(make_failed(store, tasks, task_id, now_ms), "boom")
    assert store.client.redrive_many(["s"], now_ms + 5) == [True]
    # When only a and s are named
    assert main(["--home", str(local_home), "redrive", "a", "s"]) == 0
    # Then a is redriven, s left as it is, and only b's letter remains
    assert read_task(store, "a").status is TaskStatus.PENDING
    assert read_task(store, "b").status is TaskStatus.FAILED
    assert [m.task_id for m in queue.receive()] == ["b"]
    assert "redrive: 1 task(s) redriven, 1 unchanged; 2 dead letter(s) removed" in capsys.readouterr().out


def test_cli_prints_the_report_a_line_per_task_then_the_counts(
    store: DynamoStores, tasks: Any, local_home: Path, now_ms: int, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a FAILED task, a PENDING one, and an id with no task
    make_failed(store, tasks, "f", now_ms)
    tasks.create(now_ms + 5_000, "p")
    # When all three are named
    assert main(["--home", str(local_home), "redrive", "f", "p", "ghost"]) == 0
    # Then the report says what became of each, then counts them
    assert capsys.readouterr().out.splitlines() == [
        "f: redriven (FAILED -> PENDING, due now)",
        "p: PENDING, not FAILED: nothing to do",
        "ghost: no such task: nothing to do",
        "redrive: 1 task(s) redriven, 2 unchanged; 0 dead letter(s) removed",
    ]


def test_cli_prints_a_lost_race() -> None:
    # Given a report of a task another caller redrove first, and of one deleted meanwhile
    task = Task(task_id="r", due_at="2030-06-01T12:00:00Z", action={"kind": "log"})
    report = RedriveReport(
        skipped=(
            Skipped(task_id="r", reason=SkipReason.LOST_RACE, task=task),
            Skipped(task_id="d", reason=SkipReason.LOST_RACE, task=None),
        )
    )
    # When it is printed  Then each says it lost the race, and how the task is now
    assert redrive_lines(report) == [
        "r: lost the race: PENDING now, changed by another caller: nothing to do",
        "d: lost the race: gone now, changed by another caller: nothing to do",
        "redrive: 0 task(s) redriven, 2 unchanged; no dead-letter queue configured",
    ]


def test_cli_redrive_on_sqs(
    store: DynamoStores,
    tasks: Any,
    sqs: Any,
    queue_url: str,
    now_ms: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given AWS settings naming the table and the SQS dead-letter queue, and two dead-lettered FAILED tasks
    monkeypatch.setenv("PUNCTUAL_TABLE_NAME", TABLE)
    monkeypatch.setenv("PUNCTUAL_REGION", "us-east-1")
    monkeypatch.setenv("PUNCTUAL_DEAD_LETTER_QUEUE_URL", queue_url)
    queue = SqsDeadLetterQueue(sqs, queue_url)
    for task_id in ("a", "b"):
        queue.send(make_failed(store, tasks, task_id, now_ms), "boom")
    # When `punctual redrive a --aws` runs
    assert main(["--home", str(tmp_path), "redrive", "a", "--aws"]) == 0
    # Then a is PENDING and its message deleted; b's message is back in the queue, b still FAILED
    assert read_task(store, "a").status is TaskStatus.PENDING
    assert read_task(store, "b").status is TaskStatus.FAILED
    assert [m.task_id for m in queue.receive()] == ["b"]
    assert "redrive: 1 task(s) redriven, 0 unchanged; 1 dead letter(s) removed" in capsys.readouterr().out


def test_cli_redrive_needs_all_or_ids(local_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(local_home), "redrive"]) == 2
    assert "give --all or one or more task ids" in capsys.readouterr().err
