"""The dead-letter queue: where a task goes when its last attempt failed (SQS in AWS, a JSON-lines file locally).

The executor sends a message *after* the FAILED record is written. A crash between the two leaves the task
FAILED in the table with no message: ``punctual redrive --all`` therefore takes FAILED tasks from the table as
well as from the queue. A message is JSON::

    {"message_id": "...", "task_id": "...", "occurrence": 0, "attempt": 3, "reason": "HTTP 500 ...",
     "failed_at": "2030-06-01T12:00:20.123+00:00"}

Redrive (:func:`punctual.scheduling.redrive.redrive_tasks`, behind ``punctual redrive``) reads the queue
(:meth:`receive`), puts the tasks back to PENDING, then removes the messages of the tasks it settled
(:meth:`acknowledge`) and hands the others back (:meth:`release`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlsplit

from punctual.config.settings import Settings
from punctual.domain.model import Task

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One message of the queue. ``receipt`` is what removes it (SQS: the receipt handle)."""

    message_id: str
    task_id: str
    occurrence: int
    attempt: int
    reason: str
    failed_at: str
    receipt: str | None = None


def message_of(task: Task, reason: str) -> dict[str, Any]:
    """The JSON body of a dead letter for ``task`` (its ``finished_at`` is the failure time, if set)."""
    failed_at = task.finished_at or datetime.now(UTC)
    return {
        "message_id": uuid.uuid4().hex,
        "task_id": task.task_id,
        "occurrence": task.occurrence,
        "attempt": task.attempt,
        "reason": reason[:4_000],
        "failed_at": failed_at.isoformat(timespec="milliseconds"),
    }


def _letter(body: dict[str, Any], receipt: str | None) -> DeadLetter:
    return DeadLetter(
        message_id=str(body.get("message_id", "")),
        task_id=str(body["task_id"]),
        occurrence=int(body.get("occurrence", 0)),
        attempt=int(body.get("attempt", 0)),
        reason=str(body.get("reason", "")),
        failed_at=str(body.get("failed_at", "")),
        receipt=receipt,
    )


class DeadLetterQueue(Protocol):
    """What the executor needs: send one task that exhausted its attempts."""

    def send(self, task: Task, reason: str) -> None: ...


class RedrivableQueue(DeadLetterQueue, Protocol):
    """What redrive (:mod:`punctual.scheduling.redrive`) needs besides."""

    def receive(self) -> list[DeadLetter]: ...

    def acknowledge(self, letters: list[DeadLetter]) -> int: ...

    def release(self, letters: list[DeadLetter]) -> None: ...


def _receipt_of(letter: DeadLetter) -> str:
    """The receipt handle of a letter :meth:`SqsDeadLetterQueue.receive` returned (each has one)."""
    if letter.receipt is None:
        raise ValueError(f"dead letter {letter.message_id} has no receipt: it was not received from the queue")
    return letter.receipt


class SqsDeadLetterQueue:
    """The dead-letter queue on SQS (``Settings.dead_letter_queue_url``).

    Parameters
    ----------
    client:
        A boto3 SQS client.
    queue_url:
        The queue's URL.
    visibility_timeout_s:
        How long :meth:`receive` hides the messages it returns (redrive acknowledges or releases them before).
    """

    def __init__(self, client: SQSClient, queue_url: str, visibility_timeout_s: int = 120) -> None:
        self._client = client
        self.queue_url = queue_url
        self._visibility = visibility_timeout_s

    def send(self, task: Task, reason: str) -> None:
        self._client.send_message(QueueUrl=self.queue_url, MessageBody=json.dumps(message_of(task, reason)))

    def receive(self, limit: int = 100_000) -> list[DeadLetter]:
        """Every message now in the queue (each hidden from other readers for the visibility timeout)."""
        letters: list[DeadLetter] = []
        while len(letters) < limit:
            response = self._client.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=10, VisibilityTimeout=self._visibility, WaitTimeSeconds=1
            )
            messages = response.get("Messages", [])
            if not messages:
                break
            for message in messages:
                try:
                    letters.append(_letter(json.loads(message["Body"]), message["ReceiptHandle"]))
                except (KeyError, TypeError, ValueError):
                    log.warning(
                        "dead-letter message %s is not a Punctual message: left in the queue", message.get("MessageId")
                    )
        return letters

    def acknowledge(self, letters: list[DeadLetter]) -> int:
        """Delete these messages; returns how many were deleted."""
        deleted = 0
        for start in range(0, len(letters), 10):
            chunk = letters[start : start + 10]
            response = self._client.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": _receipt_of(letter)} for i, letter in enumerate(chunk)],
            )
            deleted += len(response.get("Successful", []))
        return deleted

    def release(self, letters: list[DeadLetter]) -> None:
        """Make these messages visible again at once."""
        for start in range(0, len(letters), 10):
            chunk = letters[start : start + 10]
            self._client.change_message_visibility_batch(
                QueueUrl=self.queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": _receipt_of(letter), "VisibilityTimeout": 0}
                    for i, letter in enumerate(chunk)
                ],
            )


class FileDeadLetterQueue:
    """The local runtime's dead-letter queue: a JSON-lines file (``Settings.dead_letter_queue_url`` =
    ``file:///path/dlq.jsonl``, see :func:`file_queue_url`).

    Each message is one line, appended and fsynced; an advisory lock (``<file>.lock``) keeps the executors'
    appends and a redrive's rewrite (a new file renamed over the old one) from interleaving.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def send(self, task: Task, reason: str) -> None:
        line = json.dumps(message_of(task, reason)) + "\n"
        with self._locked(), open(self.path, "a", encoding="utf-8") as out:
            out.write(line)
            out.flush()
            os.fsync(out.fileno())

    def _lines(self) -> list[str]:
        try:
            return self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []

    def receive(self) -> list[DeadLetter]:
        """Every message in the file (they stay there until acknowledged)."""
        letters = []
        with self._locked():
            lines = self._lines()
        for line in lines:
            try:
                body = json.loads(line)
                letters.append(_letter(body, str(body.get("message_id"))))
            except (KeyError, TypeError, ValueError):
                if line.strip():
                    log.warning("dead-letter line is not a Punctual message: left in %s", self.path)
        return letters

    def acknowledge(self, letters: list[DeadLetter]) -> int:
        """Rewrite the file without these messages (atomically: a new file renamed over it)."""
        gone = {letter.message_id for letter in letters}
        if not gone:
            return 0
        with self._locked():
            kept, removed = [], 0
            for line in self._lines():
                try:
                    message_id = json.loads(line).get("message_id")
                except (AttributeError, ValueError):
                    message_id = None
                if message_id in gone:
                    removed += 1
                else:
                    kept.append(line)
            tmp = self.path.with_name(self.path.name + ".tmp")
            with open(tmp, "w", encoding="utf-8") as out:
                out.write("".join(line + "\n" for line in kept))
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        return removed

    def release(self, letters: list[DeadLetter]) -> None:
        """Nothing to do: reading the file hides nothing."""


def file_queue_url(path: str | Path) -> str:
    """The ``dead_letter_queue_url`` that names a local JSON-lines file (made absolute)."""
    return Path(path).absolute().as_uri()


def build_dead_letter_queue(settings: Settings, sqs_client: SQSClient | None = None) -> RedrivableQueue | None:
    """The queue ``settings.dead_letter_queue_url`` names: a local file for ``file://``, else SQS; None if unset."""
    url = settings.dead_letter_queue_url
    if not url:
        return None
    if url.startswith("file:"):
        return FileDeadLetterQueue(unquote(urlsplit(url).path))
    if sqs_client is None:
        import boto3  # noqa: PLC0415  imported on first use: the tooling's file-queue helpers load this module without boto3

        sqs_client = boto3.client("sqs", region_name=settings.region)
    return SqsDeadLetterQueue(sqs_client, url)
