"""The run's own SQS queue: made for the run, read with ``SentTimestamp``, deleted at the end.

The executors may send only to the ARNs on their allowlist (``ActionTargetArns`` in AWS,
``PUNCTUAL_ALLOWED_TARGET_ARNS`` locally), exact ARNs: the queue's name is one the allowlist holds
(:func:`queue_name_for`), and the run refuses a queue that exists already, so that it deletes only what it made.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from punctual.errors import PunctualError

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

NAME_PREFIX = "punctual-verify"
_SQS_ARN = re.compile(r"arn:[\w-]+:sqs:(?P<region>[\w-]+):(?P<account>\d{12}):(?P<name>[\w-]{1,80})")
RECEIVE_WAIT_S = 5  # long polling: a receive waits up to this for a message


class VerifyError(PunctualError):
    """A verify run cannot go on (its queue, its allowlist, its stack); the message says what to do."""


def allowed_queue_arns(allowlist: str, region: str) -> list[str]:
    """The SQS queue ARNs in ``allowlist`` (comma-separated ARNs) in ``region`` whose name starts with
    ``punctual-verify``, in the order given."""
    found = []
    for arn in (part.strip() for part in allowlist.split(",")):
        match = _SQS_ARN.fullmatch(arn)
        if match and match["region"] == region and match["name"].startswith(NAME_PREFIX):
            found.append(arn)
    return found


def queue_name_for(allowlist: str, region: str, given: str | None = None) -> str:
    """The queue a run makes: ``given``, else the first ``punctual-verify*`` queue of the allowlist.

    Raises
    ------
    VerifyError
        None is given and the allowlist holds no such queue: it says which ARN to allow.
    """
    if given:
        return given
    arns = allowed_queue_arns(allowlist, region)
    if not arns:
        raise VerifyError(
            f"the executors may send only to the exact ARNs of their allowlist, and it holds no SQS queue named "
            f"{NAME_PREFIX}* in {region}: add arn:aws:sqs:{region}:<account>:{NAME_PREFIX} (any name starting "
            f"{NAME_PREFIX}) to ActionTargetArns (PUNCTUAL_ALLOWED_TARGET_ARNS locally); verify makes that queue "
            "and deletes it"
        )
    match = _SQS_ARN.fullmatch(arns[0])
    assert match is not None
    return match["name"]


class VerifyQueue:
    """The queue ``name``, made by :meth:`create` and removed by :meth:`delete`, on the boto3 SQS client ``sqs``."""

    def __init__(self, sqs: SQSClient, name: str) -> None:
        self.sqs = sqs
        self.name = name
        self.url: str | None = None
        self.arn: str | None = None
        self.requests = 0  # SQS calls made, for the record

    def _call(self, operation: str, **kwargs: Any) -> Any:
        self.requests += 1
        return getattr(self.sqs, operation)(**kwargs)

    def exists(self) -> bool:
        try:
            self._call("get_queue_url", QueueName=self.name)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if "NonExistentQueue" in code or "QueueDoesNotExist" in code:  # SQS's query-compatible code, or its own
                return False
            raise
        return True

    def create(self, allowlist: Iterable[str]) -> str:
        """Make the queue and return its ARN, which must be on ``allowlist``.

        Raises
        ------
        VerifyError
            The queue exists already (it is not this run's), SQS refuses the name for now (a queue of that name
            was deleted less than 60 s ago), or its ARN is not on the allowlist (the queue is deleted again).
        """
        if self.exists():
            raise VerifyError(
                f"a queue named {self.name} exists already: verify uses a queue of its own and deletes it at the "
                "end; delete that one, or allow another name"
            )
        try:
            self.url = str(self._call("create_queue", QueueName=self.name)["QueueUrl"])
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if "QueueDeletedRecently" in code:
                raise VerifyError(
                    f"SQS refuses to make {self.name} again within 60 s of deleting it: run again in a minute"
                ) from None
            raise
        attributes = self._call("get_queue_attributes", QueueUrl=self.url, AttributeNames=["QueueArn"])
        self.arn = str(attributes["Attributes"]["QueueArn"])
        if self.arn not in set(allowlist):
            self.delete()
            raise VerifyError(f"the queue's ARN {self.arn} is not on the executors' allowlist: allow it exactly")
        return self.arn

    def receive(self, wait_s: float = RECEIVE_WAIT_S) -> list[dict[str, Any]]:
        """Up to 10 messages with their ``SentTimestamp`` (long polling up to ``wait_s``), deleted once read."""
        assert self.url is not None
        answer = self._call(
            "receive_message",
            QueueUrl=self.url,
            AttributeNames=["SentTimestamp"],
            MaxNumberOfMessages=10,
            WaitTimeSeconds=max(0, min(20, math.ceil(wait_s))),
        )
        messages: list[dict[str, Any]] = answer.get("Messages", [])
        if messages:
            entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
            self._call("delete_message_batch", QueueUrl=self.url, Entries=entries)
        return messages

    def delete(self) -> bool:
        """Delete the queue if this run made it; whether it did."""
        if self.url is None:
            return False
        self._call("delete_queue", QueueUrl=self.url)
        self.url = None
        return True
