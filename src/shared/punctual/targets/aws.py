"""AWS targets: the ``lambda``, ``sqs``, ``sns`` and ``eventbridge`` action kinds.

Each fire makes one AWS call (an asynchronous Lambda invoke, SendMessage, Publish, PutEvents) whose message
is the same canonical JSON body (:func:`message_body`)::

    {"due_ms": ..., "idempotency_key": "<task_id>:<occurrence>", "occurrence": ..., "payload": ..., "task_id": ...}

A fire can reach its target more than once (an executor taken over after it fired, a call retried by boto3):
the target drops a duplicate by ``idempotency_key``. SQS and SNS also carry the key as the message attribute
``idempotency_key``. A FIFO queue or topic (its name ends in ``.fifo``) drops it itself, within its five-minute
deduplication interval: the message's ``MessageDeduplicationId`` is the key (:func:`deduplication_id`) and its
``MessageGroupId`` the action's ``message_group_id``, by default the task id (the occurrences of a task stay in
order, tasks do not wait on each other).

Only ARNs on the allowlist (``PUNCTUAL_ALLOWED_TARGET_ARNS``, exact ARNs: a Lambda ARN with a qualifier is not
the one without) are accepted: checked when a task is scheduled (InvalidTaskError) and again when it fires
(ActionFailedError). The executor's IAM role is granted exactly the allowlisted ARNs, so the two agree.

The clients are the executor's, one per service, in the stack's region: a target must be in that region (the
ARN's region is not used to pick a client; a target elsewhere fails when it fires). A failure names the target
ARN and AWS's error code, never the payload (nor AWS's free-text message, which may quote the request);
throttling, 5xx answers and connection errors left after boto3's own retries are
:class:`~punctual.errors.TransientActionError`.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, ClassVar, Literal

from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError
from pydantic import Field, field_validator, model_validator

from punctual.domain.model import Action, canonical_json
from punctual.errors import (
    EVENT_QUEUED,
    ActionFailedError,
    InvalidRequestError,
    TransientActionError,
    is_transient_status,
)
from punctual.targets.registry import ActionEnv, ActionKind, FireContext, TargetRules, Warmup

__all__ = ["EventBridgeAction", "LambdaAction", "SnsAction", "SqsAction"]

# A batch's AWS fires get their client made (and an SQS queue's URL asked) right after the batch is armed, when
# the first of them is due at least this far ahead: making a boto3 client takes a 256 MB executor a few hundred
# ms of CPU, which a fire due sooner would wait behind.
AWS_WARM_MIN_S = 1.0
AWS_CALL_TIMEOUT_S = 30.0  # boto3's read timeout (punctual.config.clients): the longest one call of these kinds waits
MAX_DEDUPLICATION_ID = 128  # SQS and SNS: at most 128 characters for MessageDeduplicationId / MessageGroupId
KEY_ATTRIBUTE = "idempotency_key"

_PARTITION = r"aws(?:-[a-z]+)*"  # aws, aws-cn, aws-us-gov, aws-iso-b, ...
_REGION = r"(?P<region>[a-z]{2}(?:-[a-z]+)+-\d{1,2})"  # us-east-1, us-gov-west-1, cn-north-1, ...
_ACCOUNT = r"(?P<account>\d{12})"
_LAMBDA_ARN_RE = re.compile(
    rf"arn:{_PARTITION}:lambda:{_REGION}:{_ACCOUNT}:function:(?P<name>[A-Za-z0-9_-]{{1,64}})"
    r"(?::(?P<qualifier>\$LATEST|[A-Za-z0-9_-]{1,128}))?"
)
_SQS_ARN_RE = re.compile(
    rf"arn:{_PARTITION}:sqs:{_REGION}:{_ACCOUNT}:(?P<name>[A-Za-z0-9_-]{{1,75}}\.fifo|[A-Za-z0-9_-]{{1,80}})"
)
_SNS_ARN_RE = re.compile(
    rf"arn:{_PARTITION}:sns:{_REGION}:{_ACCOUNT}:(?P<name>[A-Za-z0-9_-]{{1,251}}\.fifo|[A-Za-z0-9_-]{{1,256}})"
)
_EVENT_BUS_ARN_RE = re.compile(
    rf"arn:{_PARTITION}:events:{_REGION}:{_ACCOUNT}:event-bus/(?P<name>[A-Za-z0-9._/-]{{1,256}})"
)
# SQS and SNS: what a MessageGroupId (and a MessageDeduplicationId) may hold: letters, digits, punctuation.
_GROUP_ID_RE = re.compile(r"[A-Za-z0-9!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]{1,128}")
_SOURCE_RE = re.compile(r"[A-Za-z0-9._/-]{1,256}")  # EventBridge's alphabet for Source

# Error codes that mean "too much, too fast" (botocore's standard retry list, and the services' own spellings
# of KMS throttling and internal errors): still failing after boto3's retries, the fire may pass later.
_TRANSIENT_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "Throttled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
        "PriorRequestNotComplete",
        "EC2ThrottledException",
        "RequestTimeout",
        "RequestTimeoutException",
        "KmsThrottled",
        "KMSThrottling",
        "KMSThrottlingException",
        "InternalFailure",
        "InternalError",
        "InternalErrorException",
        "InternalException",
        "ServiceUnavailable",
        "ServiceException",
    }
)


# -- what every kind sends ---------------------------------------------------------------------------------------
def message_body(context: FireContext) -> str:
    """The message every AWS kind sends: the fire's identity, due time and payload, as canonical JSON."""
    return canonical_json(
        {
            "task_id": context.task_id,
            "occurrence": context.occurrence,
            "idempotency_key": context.idempotency_key,
            "due_ms": context.due_ms,
            "payload": context.payload,
        }
    )


def deduplication_id(key: str) -> str:
    """The FIFO ``MessageDeduplicationId`` of an idempotency key: the key itself when it fits SQS's and SNS's
    128 characters (a task id and its ``:occurrence`` use only characters they accept), else the SHA-256 hex
    digest of the key (64 characters). Both are fixed for an occurrence, so every executor that fires it sends
    the same id; only task ids of more than about 120 characters are hashed."""
    if len(key) <= MAX_DEDUPLICATION_ID:
        return key
    return hashlib.sha256(key.encode()).hexdigest()


def _key_attribute(key: str) -> dict[str, dict[str, str]]:
    return {KEY_ATTRIBUTE: {"DataType": "String", "StringValue": key}}


def _fifo_fields(key: str, message_group_id: str | None, task_id: str) -> dict[str, str]:
    return {"MessageDeduplicationId": deduplication_id(key), "MessageGroupId": message_group_id or task_id}


def _arn_match(pattern: re.Pattern[str], arn: str) -> re.Match[str]:
    match = pattern.fullmatch(arn)
    if match is None:  # the validators ran: only a model built with model_construct gets here
        raise ActionFailedError(f"malformed target ARN {arn[:300]}")
    return match


class _FifoTarget(Action):
    """A queue or topic that may be FIFO (its name ends in ``.fifo``): ``message_group_id`` is accepted only
    then. Subclasses name their ARN field (:meth:`target_arn`) and what they are (``fifo_what``)."""

    message_group_id: str | None = None
    fifo_what: ClassVar[str] = "FIFO targets"

    @field_validator("message_group_id")
    @classmethod
    def _group_id_shape(cls, value: str | None) -> str | None:
        if value is not None and not _GROUP_ID_RE.fullmatch(value):
            raise ValueError("message_group_id must be 1 to 128 letters, digits or punctuation (no spaces)")
        return value

    @model_validator(mode="after")
    def _group_only_for_fifo(self) -> _FifoTarget:
        if self.message_group_id is not None and not self.is_fifo:
            raise ValueError(f"message_group_id is for {self.fifo_what} only (a name ending in .fifo)")
        return self

    def target_arn(self) -> str:
        raise NotImplementedError

    @property
    def is_fifo(self) -> bool:
        return self.target_arn().endswith(".fifo")


# -- failures ----------------------------------------------------------------------------------------------------
def _allow(env: ActionEnv, context: FireContext, arn: str, what: str, field_name: str) -> None:
    """The allowlist again when firing, the task's tenant's (from its key): a target refused since the task was
    scheduled, or never allowed to its tenant, is not called."""
    try:
        env.rules.of(context.task_id).check_arn(arn, what, field_name)
    except InvalidRequestError as exc:
        raise ActionFailedError(f"target refused: {exc}") from None


@contextmanager
def _aws_errors(operation: str, arn: str) -> Iterator[None]:
    """Turn a boto3 failure into :class:`ActionFailedError` naming ``operation``, ``arn`` and AWS's error code
    (transient for throttling, 5xx and connection errors). AWS's message is left out: it may quote the
    request, and the request holds the payload."""
    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code") or "UnknownError")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        message = f"{operation} {arn} failed: {code}" + (f" (HTTP {status})" if status else "")
        if code in _TRANSIENT_CODES or (isinstance(status, int) and is_transient_status(status)):
            raise TransientActionError(message) from None
        raise ActionFailedError(message) from None
    except (BotoConnectionError, HTTPClientError) as exc:
        raise TransientActionError(f"{operation} {arn} failed: {type(exc).__name__}") from None
    except BotoCoreError as exc:  # parameter validation, credentials: trying again would not help
        raise ActionFailedError(f"{operation} {arn} failed: {type(exc).__name__}") from None


# -- lambda ------------------------------------------------------------------------------------------------------
class LambdaAction(Action):
    """Invoke a Lambda function asynchronously (``InvocationType="Event"``) with the message body as its event.

    ``function_arn`` is the function's full ARN, optionally with a version or alias qualifier
    (``arn:aws:lambda:us-east-1:123456789012:function:name[:qualifier]``); it must be on the allowlist exactly
    as given, and in the stack's region. Lambda answers 202 once it has queued the event: the fire succeeds
    then, whatever the function later does with it (its own retries and destinations handle that).
    """

    kind: Literal["lambda"] = "lambda"
    function_arn: str

    @field_validator("function_arn")
    @classmethod
    def _function_arn_shape(cls, arn: str) -> str:
        if not _LAMBDA_ARN_RE.fullmatch(arn):
            raise ValueError(
                "function_arn must be a Lambda function ARN: "
                "arn:<partition>:lambda:<region>:<12-digit account>:function:<name>[:<qualifier>]"
            )
        return arn


def check_lambda(action: LambdaAction, rules: TargetRules) -> None:
    """Refuse a function not on the ARN allowlist (InvalidRequestError on ``action.function_arn``)."""
    rules.check_arn(action.function_arn, "Lambda function", "action.function_arn")


def run_lambda(action: LambdaAction, context: FireContext, env: ActionEnv) -> None:
    """Queue the event; anything but 202 without a function error fails."""
    arn = action.function_arn
    _allow(env, context, arn, "Lambda function", "action.function_arn")
    with _aws_errors("Invoke", arn):
        response = env.client("lambda").invoke(
            FunctionName=arn, InvocationType="Event", Payload=message_body(context).encode()
        )
    stream = response.get("Payload")
    if stream is not None:  # empty for an async invoke: read so the connection goes back to the pool
        with suppress(BotoCoreError, OSError):  # the answer is in already: a broken read changes nothing
            stream.read()
            stream.close()
    if response.get("FunctionError"):
        raise ActionFailedError(f"Invoke {arn} failed: function error {response['FunctionError']}")
    status = response.get("StatusCode")
    if status != EVENT_QUEUED:
        raise ActionFailedError(f"Invoke {arn} failed: status {status}, expected {EVENT_QUEUED} (event queued)")


# -- sqs ---------------------------------------------------------------------------------------------------------
class SqsAction(_FifoTarget):
    """Send the message body to an SQS queue, with the message attribute ``idempotency_key``.

    ``queue_arn``: ``arn:aws:sqs:<region>:<account>:<name>``, on the allowlist and in the stack's region (the
    account may be another, if the queue's policy lets the executor's role send). A queue whose name ends in
    ``.fifo`` is FIFO: the message gets a deduplication id (:func:`deduplication_id`) and the group
    ``message_group_id`` (default: the task id), which only a FIFO queue accepts.
    """

    kind: Literal["sqs"] = "sqs"
    queue_arn: str
    fifo_what: ClassVar[str] = "FIFO queues"

    @field_validator("queue_arn")
    @classmethod
    def _queue_arn_shape(cls, arn: str) -> str:
        if not _SQS_ARN_RE.fullmatch(arn):
            raise ValueError(
                "queue_arn must be an SQS queue ARN: arn:<partition>:sqs:<region>:<12-digit account>:"
                "<name> (1 to 80 letters, digits, - or _, with .fifo for a FIFO queue)"
            )
        return arn

    def target_arn(self) -> str:
        return self.queue_arn

    @property
    def queue_name(self) -> str:
        return _arn_match(_SQS_ARN_RE, self.queue_arn)["name"]

    @property
    def account(self) -> str:
        return _arn_match(_SQS_ARN_RE, self.queue_arn)["account"]


def check_sqs(action: SqsAction, rules: TargetRules) -> None:
    """Refuse a queue not on the ARN allowlist (InvalidRequestError on ``action.queue_arn``)."""
    rules.check_arn(action.queue_arn, "SQS queue", "action.queue_arn")


def _queue_url(env: ActionEnv, action: SqsAction) -> str:
    """The queue's URL, asked of SQS once per queue and process (GetQueueUrl) and kept on the env."""
    urls: dict[str, str] = env.resource("aws.sqs.queue_urls", dict)
    url = urls.get(action.queue_arn)
    if url is None:
        with _aws_errors("GetQueueUrl", action.queue_arn):
            url = str(
                env.client("sqs").get_queue_url(QueueName=action.queue_name, QueueOwnerAWSAccountId=action.account)[
                    "QueueUrl"
                ]
            )
        urls[action.queue_arn] = url  # two threads may both ask once: the same answer
    return url


def run_sqs(action: SqsAction, context: FireContext, env: ActionEnv) -> None:
    """SendMessage (FIFO: with the deduplication id and the group)."""
    arn = action.queue_arn
    _allow(env, context, arn, "SQS queue", "action.queue_arn")
    key = context.idempotency_key
    params: dict[str, Any] = {
        "QueueUrl": _queue_url(env, action),
        "MessageBody": message_body(context),
        "MessageAttributes": _key_attribute(key),
    }
    if action.is_fifo:
        params |= _fifo_fields(key, action.message_group_id, context.task_id)
    with _aws_errors("SendMessage", arn):
        env.client("sqs").send_message(**params)


# -- sns ---------------------------------------------------------------------------------------------------------
class SnsAction(_FifoTarget):
    """Publish the message body to an SNS topic, with the message attribute ``idempotency_key``.

    ``topic_arn``: ``arn:aws:sns:<region>:<account>:<name>``, on the allowlist and in the stack's region. A
    topic whose name ends in ``.fifo`` is FIFO: the message gets a deduplication id (:func:`deduplication_id`)
    and the group ``message_group_id`` (default: the task id), which only a FIFO topic accepts.
    """

    kind: Literal["sns"] = "sns"
    topic_arn: str
    fifo_what: ClassVar[str] = "FIFO topics"

    @field_validator("topic_arn")
    @classmethod
    def _topic_arn_shape(cls, arn: str) -> str:
        if not _SNS_ARN_RE.fullmatch(arn):
            raise ValueError(
                "topic_arn must be an SNS topic ARN: arn:<partition>:sns:<region>:<12-digit account>:"
                "<name> (1 to 256 letters, digits, - or _, with .fifo for a FIFO topic)"
            )
        return arn

    def target_arn(self) -> str:
        return self.topic_arn


def check_sns(action: SnsAction, rules: TargetRules) -> None:
    """Refuse a topic not on the ARN allowlist (InvalidRequestError on ``action.topic_arn``)."""
    rules.check_arn(action.topic_arn, "SNS topic", "action.topic_arn")


def run_sns(action: SnsAction, context: FireContext, env: ActionEnv) -> None:
    """Publish (FIFO: with the deduplication id and the group)."""
    arn = action.topic_arn
    _allow(env, context, arn, "SNS topic", "action.topic_arn")
    key = context.idempotency_key
    params: dict[str, Any] = {
        "TopicArn": arn,
        "Message": message_body(context),
        "MessageAttributes": _key_attribute(key),
    }
    if action.is_fifo:
        params |= _fifo_fields(key, action.message_group_id, context.task_id)
    with _aws_errors("Publish", arn):
        env.client("sns").publish(**params)


# -- eventbridge -------------------------------------------------------------------------------------------------
class EventBridgeAction(Action):
    """Put one event on an EventBridge bus; its ``detail`` is the message body.

    ``event_bus_arn``: ``arn:aws:events:<region>:<account>:event-bus/<name>``, on the allowlist and in the
    stack's region. ``source`` (1 to 256 letters, digits, ``.``, ``_``, ``-`` or ``/``; ``aws.`` is AWS's own
    prefix) and ``detail_type`` (1 to 128 characters) are what the bus's rules match on.
    """

    kind: Literal["eventbridge"] = "eventbridge"
    event_bus_arn: str
    source: str = "punctual"
    detail_type: str = Field("punctual.fire", min_length=1, max_length=128)

    @field_validator("event_bus_arn")
    @classmethod
    def _bus_arn_shape(cls, arn: str) -> str:
        if not _EVENT_BUS_ARN_RE.fullmatch(arn):
            raise ValueError(
                "event_bus_arn must be an EventBridge event bus ARN: "
                "arn:<partition>:events:<region>:<12-digit account>:event-bus/<name>"
            )
        return arn

    @field_validator("source")
    @classmethod
    def _source_rules(cls, source: str) -> str:
        if not _SOURCE_RE.fullmatch(source):
            raise ValueError("source must be 1 to 256 letters, digits, '.', '_', '-' or '/'")
        if source.startswith("aws."):
            raise ValueError("source must not start with 'aws.' (reserved for AWS services' events)")
        return source


def tenant_source(tenant: str) -> str:
    """What a tenant's events' ``source`` starts with: ``punctual.<tenant>`` (no tenant's is another's)."""
    return f"punctual.{tenant}"


def check_eventbridge(action: EventBridgeAction, rules: TargetRules) -> None:
    """Refuse a bus not on the ARN allowlist (InvalidRequestError on ``action.event_bus_arn``), and a tenant's event
    whose ``source`` is not its own (``punctual.<tenant>`` or below it): a bus's rules match on the source, so
    no tenant may speak as another or as the operator."""
    rules.check_arn(action.event_bus_arn, "EventBridge event bus", "action.event_bus_arn")
    if rules.tenant is not None:
        own = tenant_source(rules.tenant)
        if action.source != own and not action.source.startswith(own + "."):
            raise InvalidRequestError(
                "action.source", f"a tenant's events have the source {own!r} or one starting with {own + '.'!r}"
            )


def run_eventbridge(action: EventBridgeAction, context: FireContext, env: ActionEnv) -> None:
    """PutEvents with one entry; the entry failing (``FailedEntryCount``) fails the fire, with its error code
    and message (transient for throttling and internal failures)."""
    arn = action.event_bus_arn
    try:  # the bus and the source again, by the tenant of the task's key
        check_eventbridge(action, env.rules.of(context.task_id))
    except InvalidRequestError as exc:
        raise ActionFailedError(f"target refused: {exc}") from None
    detail = message_body(context)
    with _aws_errors("PutEvents", arn):
        response = env.client("events").put_events(
            Entries=[{"EventBusName": arn, "Source": action.source, "DetailType": action.detail_type, "Detail": detail}]
        )
    if response.get("FailedEntryCount", 0):
        failed = (response.get("Entries") or [{}])[0]
        code = str(failed.get("ErrorCode") or "UnknownError")
        message = f"PutEvents {arn} failed: {code}"
        if failed.get("ErrorMessage"):  # the entry's own error ("EventBus ... does not exist"), not the request's
            message += f": {str(failed['ErrorMessage'])[:200]}"
        if code in _TRANSIENT_CODES:
            raise TransientActionError(message)
        raise ActionFailedError(message)


# -- before the fires --------------------------------------------------------------------------------------------
def _prepare(service: str) -> Callable[[list[tuple[Any, float, str]], ActionEnv], list[Warmup]]:
    """The warm-up of a kind calling ``service``: its client made, and for SQS each allowed queue's URL asked, in
    a thread of the event loop right after the batch is armed; none when its first fire is due within
    :data:`AWS_WARM_MIN_S` (that fire makes the client itself, as it would without a warm-up)."""

    def prepare(fires: list[tuple[Any, float, str]], env: ActionEnv) -> list[Warmup]:
        if not fires or min(delay_s for _, delay_s, _ in fires) < AWS_WARM_MIN_S:
            return []
        queues = {}
        for action, _, task_id in fires:
            if isinstance(action, SqsAction) and action.queue_arn not in queues:
                try:  # a queue the task's tenant may not use is never asked about: its fire reports it
                    env.rules.of(task_id).check_arn(action.queue_arn, "SQS queue", "action.queue_arn")
                except InvalidRequestError:
                    continue
                queues[action.queue_arn] = action

        def warm() -> None:
            env.client(service)
            for action in queues.values():
                with suppress(ActionFailedError, TransientActionError):  # its fire asks again, and reports
                    _queue_url(env, action)

        async def start() -> None:
            await asyncio.to_thread(warm)

        return [Warmup(0.0, start)]

    return prepare


def _aws_kind(model: type[Any], run: Callable[..., None], service: str, check: Callable[..., None]) -> ActionKind[Any]:
    return ActionKind(
        model=model,
        run=run,
        max_timeout_s=AWS_CALL_TIMEOUT_S,
        clients=(service,),
        check=check,
        prepare=_prepare(service),
    )


LAMBDA = _aws_kind(LambdaAction, run_lambda, "lambda", check_lambda)
SQS = _aws_kind(SqsAction, run_sqs, "sqs", check_sqs)
SNS = _aws_kind(SnsAction, run_sns, "sns", check_sns)
EVENTBRIDGE = _aws_kind(EventBridgeAction, run_eventbridge, "events", check_eventbridge)
