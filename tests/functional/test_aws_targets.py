"""The AWS action kinds (lambda, sqs, sns, eventbridge) on moto: what each target receives, FIFO
deduplication, the ARN allowlist at schedule and fire time, the models' ARN rules, and failures that name the
target but not the payload.

Lambda: moto runs a function's code only in Docker. ``mock_aws(config={"lambda": {"use_docker": False}})``
swaps in moto's docker-free Lambda backend, which answers an async invoke with 202 without running anything (and
without looking the function up): what the function was sent is read off the request itself (a botocore
``before-call`` hook). A missing function is tested on the default backend, which looks the function up (and
fails) before it would need Docker. The answers moto cannot give (a function error, another status, throttling)
come from botocore's Stubber.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import unquote

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber
from moto import mock_aws
from pydantic import ValidationError

from punctual.domain.model import Action, Task
from punctual.errors import ActionFailedError, InvalidRequestError, TransientActionError
from punctual.targets import (
    ActionEnv,
    EventBridgeAction,
    FireContext,
    LambdaAction,
    SnsAction,
    SqsAction,
    TargetRules,
    check_action,
    kind_of,
    run_action,
)
from punctual.targets.aws import AWS_WARM_MIN_S, SQS, deduplication_id, message_body
from punctual.targets.registry import Warmup

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account
PAYLOAD = {"order": 42, "note": "s3cr3t-payload-marker"}
MARKER = "s3cr3t-payload-marker"
FUNCTION_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:punctual-target"
BUS_ARN = f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/punctual-bus"


def context_of(task_id: str = "task-1", occurrence: int = 0, payload: Any = PAYLOAD) -> FireContext:
    return FireContext(
        task_id=task_id,
        occurrence=occurrence,
        due_ms=1_900_000_000_000,
        started_ms=1_900_000_000_000.5,
        payload=payload,
    )


def env_for(clients: dict[str, Any], *arns: str) -> ActionEnv:
    return ActionEnv(rules=TargetRules(arns=frozenset(arns)), clients=clients)


class Aws:
    """moto's clients, and the queues a test creates to see what a target received."""

    def __init__(self) -> None:
        self.sqs: Any = boto3.client("sqs", region_name=REGION)
        self.sns: Any = boto3.client("sns", region_name=REGION)
        self.events: Any = boto3.client("events", region_name=REGION)
        self.lambda_: Any = boto3.client("lambda", region_name=REGION)

    @property
    def clients(self) -> dict[str, Any]:
        return {"sqs": self.sqs, "sns": self.sns, "events": self.events, "lambda": self.lambda_}

    def queue(self, name: str) -> tuple[str, str]:
        """A new queue's URL and ARN (FIFO when ``name`` ends in .fifo)."""
        attributes = {"FifoQueue": "true"} if name.endswith(".fifo") else {}
        url = self.sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        arn = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        return url, arn

    def receive(self, url: str) -> list[dict[str, Any]]:
        """Every message waiting in the queue (moto hands them over at once)."""
        response = self.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"], MessageAttributeNames=["All"]
        )
        return list(response.get("Messages", []))


@pytest.fixture
def aws() -> Iterator[Aws]:
    with mock_aws(config={"lambda": {"use_docker": False}}):
        yield Aws()


def calls_of(client: Any, operation: str) -> list[dict[str, Any]]:
    """The requests ``client`` sends for ``operation`` from now on (botocore's before-call hook)."""
    seen: list[dict[str, Any]] = []
    client.meta.events.register(
        f"before-call.{client.meta.service_model.service_name}.{operation}", lambda params, **_: seen.append(params)
    )
    return seen


# -- what each target receives -----------------------------------------------------------------------------------
def test_the_body_is_canonical_json_with_the_idempotency_key() -> None:
    # Given a fire of occurrence 3
    context = context_of("task-1", 3)

    # When its message body is built
    body = message_body(context)

    # Then it is compact, key-sorted JSON holding the fire's identity, due time and payload
    assert json.loads(body) == {
        "task_id": "task-1",
        "occurrence": 3,
        "idempotency_key": "task-1:3",
        "due_ms": 1_900_000_000_000,
        "payload": PAYLOAD,
    }
    assert body == json.dumps(json.loads(body), sort_keys=True, separators=(",", ":"))


def test_sqs_standard_queue_gets_one_message_per_fire(aws: Aws) -> None:
    # Given an allowlisted standard queue
    url, arn = aws.queue("orders")
    env = env_for(aws.clients, arn)

    # When the task fires once
    run_action(SqsAction(queue_arn=arn), context_of(), env)

    # Then the queue holds one message: the body, with the idempotency key as an attribute
    [message] = aws.receive(url)
    assert message["Body"] == message_body(context_of())
    assert message["MessageAttributes"]["idempotency_key"]["StringValue"] == "task-1:0"


def test_sqs_queue_url_is_asked_once_per_queue(aws: Aws) -> None:
    # Given an allowlisted queue and a count of GetQueueUrl calls
    url, arn = aws.queue("orders")
    env = env_for(aws.clients, arn)
    lookups = calls_of(aws.sqs, "GetQueueUrl")

    # When three occurrences fire
    for occurrence in range(3):
        run_action(SqsAction(queue_arn=arn), context_of(occurrence=occurrence), env)

    # Then three messages went out, after one URL lookup
    assert len(aws.receive(url)) == 3
    assert len(lookups) == 1


async def _started(warmup: Warmup) -> None:
    await warmup.start()


def warm(fires: list[tuple[Action, float, str]], env: ActionEnv) -> int:
    """Run the SQS kind's warm-ups for ``fires`` to their end here; how many there were."""
    assert SQS.prepare is not None
    warmups = SQS.prepare(fires, env)
    for warmup in warmups:
        asyncio.run(_started(warmup))
    return len(warmups)


def test_a_batch_asks_its_queue_urls_before_its_first_fire_then_fires_without_asking(aws: Aws) -> None:
    # Given two allowlisted queues, one not allowlisted, and a count of GetQueueUrl calls
    (url_a, arn_a), (_, arn_b), (_, refused) = aws.queue("a"), aws.queue("b"), aws.queue("c")
    env = env_for(aws.clients, arn_a, arn_b)
    lookups = calls_of(aws.sqs, "GetQueueUrl")
    actions = [SqsAction(queue_arn=arn) for arn in (arn_a, arn_b, arn_a, refused)]

    # When a batch armed with fires due 2 s and more ahead is warmed
    assert warm([(a, 2.0 + i, f"t-{i}") for i, a in enumerate(actions)], env) == 1

    # Then each allowed queue's URL was asked once (two queues), the refused one's never
    assert len(lookups) == 2
    # ... and the fires ask no more
    run_action(actions[0], context_of(), env)
    assert len(lookups) == 2
    assert len(aws.receive(url_a)) == 1


def test_no_warm_up_competes_with_a_fire_due_within_the_warm_up_minimum(aws: Aws) -> None:
    # Given a batch whose first SQS fire is due just inside the minimum
    _, arn = aws.queue("soon")
    env = env_for(aws.clients, arn)
    lookups = calls_of(aws.sqs, "GetQueueUrl")
    fires: list[tuple[Action, float, str]] = [(SqsAction(queue_arn=arn), AWS_WARM_MIN_S - 0.01, "t-0")]
    fires.append((SqsAction(queue_arn=arn), 30.0, "t-1"))
    # When it is prepared  Then nothing is warmed: the first fire makes the client and asks the URL itself
    assert warm(fires, env) == 0
    assert lookups == []


def test_sqs_fifo_drops_a_second_send_of_the_same_occurrence(aws: Aws) -> None:
    # Given an allowlisted FIFO queue (moto does deduplicate on MessageDeduplicationId within 5 minutes)
    url, arn = aws.queue("orders.fifo")
    env = env_for(aws.clients, arn)
    action = SqsAction(queue_arn=arn)

    # When occurrence 0 fires twice (an executor taken over after firing) and occurrence 1 once
    run_action(action, context_of(occurrence=0), env)
    run_action(action, context_of(occurrence=0), env)
    run_action(action, context_of(occurrence=1), env)

    # Then the queue holds one message per occurrence, deduplicated by key, grouped by task id
    messages = aws.receive(url)
    assert [m["Attributes"]["MessageDeduplicationId"] for m in messages] == ["task-1:0", "task-1:1"]
    assert {m["Attributes"]["MessageGroupId"] for m in messages} == {"task-1"}
    assert [json.loads(m["Body"])["idempotency_key"] for m in messages] == ["task-1:0", "task-1:1"]


def test_sqs_fifo_uses_the_given_message_group(aws: Aws) -> None:
    # Given a FIFO queue action with its own message group
    url, arn = aws.queue("orders.fifo")
    env = env_for(aws.clients, arn)

    # When it fires
    run_action(SqsAction(queue_arn=arn, message_group_id="tenant-7"), context_of(), env)

    # Then the message is in that group
    [message] = aws.receive(url)
    assert message["Attributes"]["MessageGroupId"] == "tenant-7"


def test_a_key_longer_than_128_characters_is_deduplicated_by_its_sha256(aws: Aws) -> None:
    # Given a FIFO queue and a task id of 128 characters (its key "<id>:0" has 130)
    url, arn = aws.queue("orders.fifo")
    env = env_for(aws.clients, arn)
    task_id = "t" * 128
    key = f"{task_id}:0"

    # When it fires
    run_action(SqsAction(queue_arn=arn), context_of(task_id), env)

    # Then the deduplication id is the key's SHA-256 hex (64 characters); the body keeps the key itself
    [message] = aws.receive(url)
    assert message["Attributes"]["MessageDeduplicationId"] == hashlib.sha256(key.encode()).hexdigest()
    assert len(message["Attributes"]["MessageDeduplicationId"]) == 64
    assert json.loads(message["Body"])["idempotency_key"] == key


def test_deduplication_id_is_the_key_up_to_128_characters() -> None:
    # Given keys of exactly 128 and of 129 characters
    at_limit, past_limit = "k" * 128, "k" * 129

    # When their deduplication ids are made
    # Then the first is the key itself, the second its SHA-256 hex
    assert deduplication_id(at_limit) == at_limit
    assert deduplication_id(past_limit) == hashlib.sha256(past_limit.encode()).hexdigest()


def test_sns_standard_topic_delivers_the_body_to_a_subscribed_queue(aws: Aws) -> None:
    # Given an allowlisted topic with a queue subscribed
    topic = aws.sns.create_topic(Name="fires")["TopicArn"]
    url, queue_arn = aws.queue("fires-inbox")
    aws.sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    env = env_for(aws.clients, topic)

    # When the task fires once
    run_action(SnsAction(topic_arn=topic), context_of(), env)

    # Then the queue gets one notification: the body as its message, the key as an attribute
    [message] = aws.receive(url)
    notification = json.loads(message["Body"])
    assert notification["Message"] == message_body(context_of())
    assert notification["MessageAttributes"]["idempotency_key"]["Value"] == "task-1:0"


def test_sns_fifo_topic_drops_a_second_publish_of_the_same_occurrence(aws: Aws) -> None:
    # Given an allowlisted FIFO topic with a FIFO queue subscribed
    topic = aws.sns.create_topic(Name="fires.fifo", Attributes={"FifoTopic": "true"})["TopicArn"]
    url, queue_arn = aws.queue("fires-inbox.fifo")
    aws.sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    env = env_for(aws.clients, topic)

    # When occurrence 0 fires twice
    run_action(SnsAction(topic_arn=topic), context_of(), env)
    run_action(SnsAction(topic_arn=topic), context_of(), env)

    # Then one notification arrives, deduplicated by the key, in the task's group
    [message] = aws.receive(url)
    assert message["Attributes"]["MessageDeduplicationId"] == "task-1:0"
    assert message["Attributes"]["MessageGroupId"] == "task-1"
    assert json.loads(json.loads(message["Body"])["Message"])["idempotency_key"] == "task-1:0"


def test_eventbridge_puts_one_event_whose_detail_is_the_body(aws: Aws) -> None:
    # Given an allowlisted bus with a rule sending punctual's events to a queue
    bus = aws.events.create_event_bus(Name="punctual-bus")["EventBusArn"]
    url, queue_arn = aws.queue("events-inbox")
    aws.events.put_rule(
        Name="fires",
        EventBusName="punctual-bus",
        EventPattern=json.dumps({"source": ["punctual"], "detail-type": ["punctual.fire"]}),
    )
    aws.events.put_targets(Rule="fires", EventBusName="punctual-bus", Targets=[{"Id": "inbox", "Arn": queue_arn}])
    env = env_for(aws.clients, bus)

    # When the task fires once
    run_action(EventBridgeAction(event_bus_arn=bus), context_of(), env)

    # Then the rule delivers one event: its detail is the body
    [message] = aws.receive(url)
    event = json.loads(message["Body"])
    assert event["source"] == "punctual"
    assert event["detail-type"] == "punctual.fire"
    assert event["detail"] == json.loads(message_body(context_of()))


def test_lambda_is_invoked_asynchronously_once_per_fire(aws: Aws) -> None:
    # Given an allowlisted function (moto's docker-free backend accepts the invoke without running code)
    env = env_for(aws.clients, FUNCTION_ARN)
    invokes = calls_of(aws.lambda_, "Invoke")

    # When the task fires once
    run_action(LambdaAction(function_arn=FUNCTION_ARN), context_of(), env)

    # Then one async invoke went out, with the body as the event
    [request] = invokes
    assert request["headers"]["X-Amz-Invocation-Type"] == "Event"
    assert unquote(request["url_path"]).endswith(f"/functions/{FUNCTION_ARN}/invocations")
    assert request["body"] == message_body(context_of()).encode()


def test_lambda_qualified_arn_is_invoked_as_given(aws: Aws) -> None:
    # Given a function ARN with an alias, allowlisted exactly
    qualified = f"{FUNCTION_ARN}:live"
    env = env_for(aws.clients, qualified)
    invokes = calls_of(aws.lambda_, "Invoke")

    # When the task fires
    run_action(LambdaAction(function_arn=qualified), context_of(), env)

    # Then the invoke names the qualified ARN
    [request] = invokes
    assert unquote(request["url_path"]).endswith(f"/functions/{qualified}/invocations")


# -- answers moto cannot give: botocore's Stubber ----------------------------------------------------------------
def stubbed(service: Literal["lambda", "events"]) -> tuple[Any, Stubber]:
    client: Any = boto3.client(
        service, region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    return client, Stubber(client)


def empty_stream() -> StreamingBody:
    return StreamingBody(io.BytesIO(b""), 0)


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        ({"StatusCode": 202, "FunctionError": "Unhandled"}, "function error Unhandled"),
        ({"StatusCode": 200}, "status 200, expected 202"),
    ],
    ids=["function-error", "status-200"],
)
def test_lambda_answer_other_than_202_fails(answer: dict[str, Any], fragment: str) -> None:
    # Given a Lambda client that answers the invoke with a function error, or a status other than 202
    client, stubber = stubbed("lambda")
    stubber.add_response("invoke", {**answer, "Payload": empty_stream()})
    env = env_for({"lambda": client}, FUNCTION_ARN)

    # When the task fires
    # Then the fire fails, naming the function and what went wrong
    with stubber, pytest.raises(ActionFailedError) as failure:
        run_action(LambdaAction(function_arn=FUNCTION_ARN), context_of(), env)
    assert FUNCTION_ARN in str(failure.value)
    assert fragment in str(failure.value)
    assert not isinstance(failure.value, TransientActionError)


@pytest.mark.parametrize(
    ("code", "status", "transient"),
    [
        ("TooManyRequestsException", 429, True),
        ("ServiceException", 500, True),
        ("AccessDeniedException", 403, False),
        ("RequestTooLargeException", 413, False),
    ],
)
def test_lambda_error_codes_map_to_transient_or_permanent(code: str, status: int, transient: bool) -> None:
    # Given a Lambda client whose invoke fails with ``code`` (after boto3's own retries)
    client, stubber = stubbed("lambda")
    stubber.add_client_error(
        "invoke", service_error_code=code, service_message=f"echo {MARKER}", http_status_code=status
    )
    env = env_for({"lambda": client}, FUNCTION_ARN)

    # When the task fires
    # Then it fails (transient for throttling and 5xx), naming the ARN and the code, not AWS's message
    with stubber, pytest.raises(ActionFailedError) as failure:
        run_action(LambdaAction(function_arn=FUNCTION_ARN), context_of(), env)
    assert isinstance(failure.value, TransientActionError) is transient
    assert FUNCTION_ARN in str(failure.value)
    assert code in str(failure.value)
    assert MARKER not in str(failure.value)


@pytest.mark.parametrize(
    ("code", "transient"), [("ThrottlingException", True), ("InternalFailure", True), ("AccessDeniedException", False)]
)
def test_eventbridge_failed_entry_fails_with_its_error(code: str, transient: bool) -> None:
    # Given an events client whose PutEvents answers with the one entry failed
    client, stubber = stubbed("events")
    stubber.add_response(
        "put_events",
        {"FailedEntryCount": 1, "Entries": [{"ErrorCode": code, "ErrorMessage": "the entry could not be put"}]},
    )
    env = env_for({"events": client}, BUS_ARN)

    # When the task fires
    # Then the fire fails with the entry's code and message
    with stubber, pytest.raises(ActionFailedError) as failure:
        run_action(EventBridgeAction(event_bus_arn=BUS_ARN), context_of(), env)
    assert str(failure.value) == f"PutEvents {BUS_ARN} failed: {code}: the entry could not be put"
    assert isinstance(failure.value, TransientActionError) is transient


# -- the allowlist -----------------------------------------------------------------------------------------------
ACTIONS: list[tuple[Action, str]] = [
    (LambdaAction(function_arn=FUNCTION_ARN), "action.function_arn"),
    (SqsAction(queue_arn=f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders"), "action.queue_arn"),
    (SnsAction(topic_arn=f"arn:aws:sns:{REGION}:{ACCOUNT}:fires"), "action.topic_arn"),
    (EventBridgeAction(event_bus_arn=BUS_ARN), "action.event_bus_arn"),
]
KIND_IDS = ["lambda", "sqs", "sns", "eventbridge"]


@pytest.mark.parametrize(("action", "field_name"), ACTIONS, ids=KIND_IDS)
def test_an_arn_off_the_allowlist_is_refused_when_scheduled_and_when_fired(action: Action, field_name: str) -> None:
    # Given rules that allow another ARN only, and clients that must not be called
    rules = TargetRules(arns=frozenset({f"arn:aws:sqs:{REGION}:{ACCOUNT}:other"}))
    env = ActionEnv(rules=rules, clients={})

    # When the task is checked at schedule time
    # Then InvalidRequestError names the field (the client raises it as the task's or the schedule's)
    with pytest.raises(InvalidRequestError) as refused:
        check_action(action, rules)
    assert refused.value.field == field_name

    # When it fires anyway (the allowlist changed since)
    # Then the fire fails before any call (no client is configured: a call would fail differently)
    with pytest.raises(ActionFailedError, match="not an allowed target"):
        run_action(action, context_of(), env)


@pytest.mark.parametrize(("action", "field_name"), ACTIONS, ids=KIND_IDS)
def test_an_allowlisted_arn_passes_the_schedule_check(action: Action, field_name: str) -> None:
    # Given rules that allow the action's ARN
    rules = TargetRules(arns=frozenset({getattr(action, field_name.removeprefix("action."))}))

    # When the task is checked
    # Then nothing is raised, and the kind declares its client and 30 s timeout
    check_action(action, rules)
    assert kind_of(action).max_timeout_s == 30.0
    assert len(kind_of(action).clients) == 1


# -- a missing target --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("action", "field_name"), ACTIONS, ids=KIND_IDS)
def test_a_missing_target_fails_naming_the_arn_not_the_payload(action: Action, field_name: str) -> None:
    # Given allowlisted targets that do not exist (moto's default Lambda backend looks the function up)
    arn = getattr(action, field_name.removeprefix("action."))
    with mock_aws():
        env = env_for(Aws().clients, arn)

        # When the task fires
        # Then it fails permanently, naming the ARN and AWS's error code, never the payload
        with pytest.raises(ActionFailedError) as failure:
            run_action(action, context_of(), env)
    message = str(failure.value)
    assert arn in message
    assert "failed: " in message
    assert MARKER not in message
    assert not isinstance(failure.value, TransientActionError)


# -- the models --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "field_name", "arn"),
    [
        (LambdaAction, "function_arn", "punctual-target"),
        (LambdaAction, "function_arn", f"arn:aws:lambda:{REGION}:{ACCOUNT}:punctual-target"),
        (LambdaAction, "function_arn", f"arn:aws:lambda:{REGION}:12345:function:punctual-target"),
        (LambdaAction, "function_arn", f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:bad name"),
        (LambdaAction, "function_arn", f"{FUNCTION_ARN}:live:extra"),
        (LambdaAction, "function_arn", f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders"),
        (SqsAction, "queue_arn", f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/orders"),
        (SqsAction, "queue_arn", f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders/extra"),
        (SqsAction, "queue_arn", f"arn:aws:sqs:{REGION}:{ACCOUNT}:" + "q" * 81),
        (SqsAction, "queue_arn", f"arn:aws:sqs:Us-East-1:{ACCOUNT}:orders"),
        (SnsAction, "topic_arn", f"arn:aws:sns:{REGION}:{ACCOUNT}:fires:subscription-id"),
        (SnsAction, "topic_arn", f"arn:aws:sns:{REGION}:{ACCOUNT}:"),
        (SnsAction, "topic_arn", f"arn:aws:sqs:{REGION}:{ACCOUNT}:fires"),
        (EventBridgeAction, "event_bus_arn", "punctual-bus"),
        (EventBridgeAction, "event_bus_arn", f"arn:aws:events:{REGION}:{ACCOUNT}:rule/punctual-bus"),
        (EventBridgeAction, "event_bus_arn", f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/"),
    ],
)
def test_a_malformed_arn_is_refused_by_the_model(model: type[Action], field_name: str, arn: str) -> None:
    # Given an ARN of the wrong shape for the kind
    # When the action is built
    # Then validation fails on that field, saying what shape is expected
    with pytest.raises(ValidationError) as refused:
        model.model_validate({field_name: arn})
    [error] = refused.value.errors()
    assert error["loc"] == (field_name,)
    assert "ARN" in error["msg"]


@pytest.mark.parametrize(
    ("model", "field_name", "arn"),
    [
        (LambdaAction, "function_arn", FUNCTION_ARN),
        (LambdaAction, "function_arn", f"{FUNCTION_ARN}:7"),
        (LambdaAction, "function_arn", f"{FUNCTION_ARN}:$LATEST"),
        (LambdaAction, "function_arn", f"arn:aws-us-gov:lambda:us-gov-west-1:{ACCOUNT}:function:f"),
        (SqsAction, "queue_arn", f"arn:aws-cn:sqs:cn-north-1:{ACCOUNT}:orders"),
        (SqsAction, "queue_arn", f"arn:aws:sqs:{REGION}:{ACCOUNT}:" + "q" * 75 + ".fifo"),
        (SnsAction, "topic_arn", f"arn:aws:sns:ap-southeast-2:{ACCOUNT}:fires.fifo"),
        (EventBridgeAction, "event_bus_arn", f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/default"),
    ],
)
def test_a_well_formed_arn_is_accepted(model: type[Action], field_name: str, arn: str) -> None:
    # Given an ARN of the kind's shape
    # When the action is built
    # Then it keeps the ARN as given
    assert getattr(model.model_validate({field_name: arn}), field_name) == arn


@pytest.mark.parametrize(
    "fields",
    [
        {"source": "aws.events"},
        {"source": ""},
        {"source": "my source"},
        {"source": "s" * 257},
        {"detail_type": ""},
        {"detail_type": "d" * 129},
    ],
    ids=["aws-prefix", "empty-source", "space-in-source", "long-source", "empty-detail-type", "long-detail-type"],
)
def test_eventbridge_source_and_detail_type_rules(fields: dict[str, str]) -> None:
    # Given a source or detail type EventBridge would refuse
    # When the action is built
    # Then validation fails
    with pytest.raises(ValidationError):
        EventBridgeAction(event_bus_arn=BUS_ARN, **fields)


def test_eventbridge_defaults_and_limits() -> None:
    # Given a source and detail type at their limits
    action = EventBridgeAction(event_bus_arn=BUS_ARN, source="s" * 256, detail_type="d" * 128)

    # Then they are accepted, and the defaults are punctual's
    assert action.source == "s" * 256
    assert len(action.detail_type) == 128
    assert EventBridgeAction(event_bus_arn=BUS_ARN).source == "punctual"
    assert EventBridgeAction(event_bus_arn=BUS_ARN).detail_type == "punctual.fire"


@pytest.mark.parametrize(
    ("model", "field_name", "arn"),
    [
        (SqsAction, "queue_arn", f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders"),
        (SnsAction, "topic_arn", f"arn:aws:sns:{REGION}:{ACCOUNT}:fires"),
    ],
    ids=["sqs", "sns"],
)
def test_a_message_group_needs_a_fifo_target(model: type[Action], field_name: str, arn: str) -> None:
    # Given a standard (non-FIFO) target
    # When an action names a message group for it
    # Then validation fails; a FIFO target accepts it, and a group with a space is refused
    with pytest.raises(ValidationError, match="FIFO"):
        model.model_validate({field_name: arn, "message_group_id": "tenant-7"})
    assert model.model_validate({field_name: f"{arn}.fifo", "message_group_id": "tenant-7"})
    with pytest.raises(ValidationError, match="message_group_id"):
        model.model_validate({field_name: f"{arn}.fifo", "message_group_id": "tenant 7"})


def test_extra_fields_are_refused() -> None:
    # Given an action with a field no kind has
    # When it is built
    # Then validation fails (extra=forbid)
    with pytest.raises(ValidationError):
        SqsAction.model_validate({"queue_arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders", "queue_url": "x"})


@pytest.mark.parametrize(
    ("action", "model"),
    [
        ({"kind": "lambda", "function_arn": FUNCTION_ARN}, LambdaAction),
        (
            {"kind": "sqs", "queue_arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders.fifo", "message_group_id": "g"},
            SqsAction,
        ),
        ({"kind": "sns", "topic_arn": f"arn:aws:sns:{REGION}:{ACCOUNT}:fires"}, SnsAction),
        ({"kind": "eventbridge", "event_bus_arn": BUS_ARN, "detail_type": "order.due"}, EventBridgeAction),
    ],
    ids=KIND_IDS,
)
def test_the_task_model_accepts_each_kind(action: dict[str, Any], model: type[Action]) -> None:
    # Given a task whose action is given as a mapping
    task = Task(task_id="order-42", due_at=datetime(2030, 6, 1, 12, tzinfo=UTC), action=action)

    # Then the action is the kind's model, and the task reads back from its own dump unchanged
    assert isinstance(task.action, model)
    assert Task.model_validate(task.model_dump(mode="json")) == task
