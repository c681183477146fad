"""The IAM evaluator and the live check: known decisions, what a call asks IAM for, and a process that refuses.

The evaluator (@cloud-copilot/iam-simulate, run by node) is trusted by test_iam_grants.py only after it gives the
answers IAM's documented logic gives: an Allow, an implicit deny, an explicit Deny on ``dynamodb:LeadingKeys``
that wins over an Allow, and a refusal of an action that does not exist (TransactWriteItems); and it agrees with the
direct client's table of decisions (test_sam_stack.py) on the template's own conditional role.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from test_sam_stack import DIRECT_CLIENT_DECISIONS

from punctual.config.settings import Settings
from punctual_tools.iam import (
    AccessRequest,
    AwsCall,
    IamCheck,
    IamDeniedError,
    Judge,
    KeyNames,
    RolePolicies,
    Stack,
    check_enabled,
    install_iam_check,
    requests_of,
)
from punctual_tools.iam.policies import role_policies_of
from punctual_tools.template import ensure_table

ACCOUNT = "123456789012"
TABLE_ARN = f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/t"
KNOWN = RolePolicies(
    "Example",
    "ExampleRole",
    f"arn:aws:sts::{ACCOUNT}:assumed-role/ExampleRole/s",
    (
        {
            "name": "example",
            "policy": {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Action": ["dynamodb:GetItem", "dynamodb:PutItem"],
                        "Resource": TABLE_ARN,
                        "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["acme/*"]}},
                    },
                    {
                        "Effect": "Deny",
                        "Action": "dynamodb:PutItem",
                        "Resource": TABLE_ARN,
                        "Condition": {"ForAnyValue:StringLike": {"dynamodb:LeadingKeys": ["*#schedule#*"]}},
                    },
                    {"Effect": "Allow", "Action": "dynamodb:Query", "Resource": f"{TABLE_ARN}/index/due"},
                ],
            },
        },
    ),
)


def _keys(*values: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return (("dynamodb:LeadingKeys", values),)


KNOWN_CASES = [
    (AccessRequest("dynamodb:GetItem", TABLE_ARN, _keys("acme/x")), "Allowed"),
    (AccessRequest("dynamodb:GetItem", TABLE_ARN, _keys("globex/x")), "ImplicitlyDenied"),
    (AccessRequest("dynamodb:PutItem", TABLE_ARN, _keys("acme/x")), "Allowed"),
    (AccessRequest("dynamodb:PutItem", TABLE_ARN, _keys("acme/#schedule#d")), "ExplicitlyDenied"),
    (AccessRequest("dynamodb:PutItem", TABLE_ARN, _keys("acme/x", "acme/#schedule#d")), "ExplicitlyDenied"),
    (AccessRequest("dynamodb:Query", f"{TABLE_ARN}/index/due"), "Allowed"),
    (AccessRequest("dynamodb:Query", f"{TABLE_ARN}/index/schedule"), "ImplicitlyDenied"),
    (AccessRequest("dynamodb:UpdateItem", TABLE_ARN, _keys("acme/x")), "ImplicitlyDenied"),
    (AccessRequest("dynamodb:TransactWriteItems", TABLE_ARN), "Error"),  # no such IAM action
]


@pytest.fixture(scope="module")
def judge() -> Judge:
    return Judge()


def test_the_evaluator_gives_the_documented_answers(judge: Judge) -> None:
    # Given a policy with a conditional Allow, a conditional Deny and an index grant  When each request is decided
    decisions = judge.decide([(KNOWN, request) for request, _ in KNOWN_CASES])
    # Then IAM's logic holds: Allow only under the condition, an explicit Deny wins, no grant is an implicit deny,
    # and an action that does not exist is refused (never allowed)
    assert [d.result for d in decisions] == [expected for _, expected in KNOWN_CASES]
    assert not decisions[-1].allowed
    assert decisions[-1].error


def test_the_evaluator_agrees_with_the_direct_clients_decisions(cfn_template: dict[str, Any], judge: Judge) -> None:
    # Given the template's direct-client role for tenant "acme", resolved  When IAM decides each case of the table
    # test_sam_stack.py keeps (and checks with its own evaluator)  Then the maintained evaluator answers the same
    acme = Stack(parameters={"TenantDirectRoleTenant": "acme"})
    role = role_policies_of(cfn_template, "TenantDirectClientRole", acme)
    table = f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/punctual-TasksTable"
    requests = [AccessRequest(action, table, _keys(*keys)) for action, keys, _ in DIRECT_CLIENT_DECISIONS]
    decisions = judge.decide([(role, r) for r in requests])
    assert [d.result for d in decisions] == [expected for _, _, expected in DIRECT_CLIENT_DECISIONS]


def test_a_cached_decision_is_not_asked_again_and_foreign_condition_keys_are_dropped() -> None:
    # Given a judge that decided a request  When the same request, and one with a key no policy names, come again
    judge = Judge()
    role = RolePolicies(
        "F",
        "R",
        KNOWN.principal,
        (
            {
                "name": "p",
                "policy": {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Action": "dynamodb:UpdateItem", "Resource": TABLE_ARN}],
                },
            },
        ),
    )
    judge.decide([(role, AccessRequest("dynamodb:UpdateItem", TABLE_ARN, _keys("a")))])
    decisions = judge.decide([(role, AccessRequest("dynamodb:UpdateItem", TABLE_ARN, _keys(str(n)))) for n in range(5)])
    # Then node was asked once: the role names no condition key, so every item's key has the same decision
    assert judge.asked == 1
    assert all(d.allowed for d in decisions)


# -- what a call asks IAM for ---------------------------------------------------------------------------------------
KEYS = KeyNames({"t": "task_id"}, {("t", "due"): "due_bucket", ("t", "schedule"): "schedule_id"})
CASES = [
    (
        AwsCall(
            "dynamodb",
            "BatchGetItem",
            {"RequestItems": {"t": {"Keys": [{"task_id": {"S": "b"}}, {"task_id": {"S": "a"}}]}}},
            "us-east-1",
        ),
        [("dynamodb:BatchGetItem", TABLE_ARN, _keys("a", "b"))],
    ),
    (
        AwsCall(
            "dynamodb",
            "Query",
            {
                "TableName": "t",
                "IndexName": "schedule",
                "KeyConditionExpression": "schedule_id = :s AND task_id BETWEEN :a AND :b",
                "ExpressionAttributeValues": {":s": {"S": "acme/daily"}},
            },
            "us-east-1",
        ),
        [("dynamodb:Query", f"{TABLE_ARN}/index/schedule", _keys("acme/daily"))],
    ),
    (
        AwsCall("dynamodb", "Scan", {"TableName": "t", "IndexName": "due"}, "us-east-1"),
        [("dynamodb:Scan", f"{TABLE_ARN}/index/due", ())],
    ),
    (
        AwsCall(
            "lambda", "Invoke", {"FunctionName": "arn:aws:lambda:us-east-1:210987654321:function:f:live"}, "eu-west-1"
        ),
        [("lambda:InvokeFunction", "arn:aws:lambda:us-east-1:210987654321:function:f:live", ())],
    ),
    (
        AwsCall("lambda", "Invoke", {"FunctionName": "f", "Qualifier": "live"}, "us-east-1"),
        [("lambda:InvokeFunction", "arn:aws:lambda:us-east-1:123456789012:function:f:live", ())],
    ),
    (
        AwsCall("sqs", "SendMessage", {"QueueUrl": "https://sqs.eu-west-1.amazonaws.com/210987654321/q"}, "us-east-1"),
        [("sqs:SendMessage", "arn:aws:sqs:eu-west-1:210987654321:q", ())],
    ),
    (
        AwsCall("sqs", "GetQueueUrl", {"QueueName": "q", "QueueOwnerAWSAccountId": "210987654321"}, "us-east-1"),
        [("sqs:GetQueueUrl", "arn:aws:sqs:us-east-1:210987654321:q", ())],
    ),
    (
        AwsCall("events", "PutEvents", {"Entries": [{"EventBusName": "b"}, {}, {"EventBusName": "b"}]}, "us-east-1"),
        [
            ("events:PutEvents", "arn:aws:events:us-east-1:123456789012:event-bus/b", ()),
            ("events:PutEvents", "arn:aws:events:us-east-1:123456789012:event-bus/default", ()),
        ],
    ),
    (
        AwsCall("ssm", "GetParameter", {"Name": "/punctual/token"}, "us-east-1"),
        [("ssm:GetParameter", "arn:aws:ssm:us-east-1:123456789012:parameter/punctual/token", ())],
    ),
    (
        AwsCall("secretsmanager", "GetSecretValue", {"SecretId": "punctual/k"}, "us-east-1"),
        [("secretsmanager:GetSecretValue", "arn:aws:secretsmanager:us-east-1:123456789012:secret:punctual/k", ())],
    ),
    (
        AwsCall("dynamodbstreams", "GetRecords", {"ShardIterator": f"{TABLE_ARN}/stream/2030|1|abc"}, "us-east-1"),
        [("dynamodb:GetRecords", f"{TABLE_ARN}/stream/2030", ())],
    ),
    (
        AwsCall(
            "dynamodbstreams",
            "DescribeStream",  # DynamoDB Local's spelling: the table's in the call's region
            {"StreamArn": "arn:aws:dynamodb:ddblocal:000000000000:table/t/stream/2030"},
            "us-east-1",
        ),
        [("dynamodb:DescribeStream", f"{TABLE_ARN}/stream/2030", ())],
    ),
    (AwsCall("dynamodbstreams", "ListStreams", {}, "us-east-1"), [("dynamodb:ListStreams", "*", ())]),
    (AwsCall("sts", "GetCallerIdentity", {}, "us-east-1"), []),
    (
        AwsCall("dynamodb", "ExecuteStatement", {"Statement": "SELECT"}, "us-east-1"),
        [("dynamodb:ExecuteStatement", "*", ())],
    ),  # not mapped: asks for what no role grants
]


@pytest.mark.parametrize(("call", "expected"), CASES, ids=[f"{c.service}.{c.operation}" for c, _ in CASES])
def test_a_call_asks_iam_for_the_actions_aws_evaluates(call: AwsCall, expected: list[tuple[Any, ...]]) -> None:
    assert [(r.action, r.resource, r.context) for r in requests_of(call, KEYS)] == expected


# -- the live check -----------------------------------------------------------------------------------------------
@pytest.fixture
def poller_check(sam_template: dict[str, Any]) -> Iterator[tuple[IamCheck, Any]]:
    """The poller's check, for a table of moto, and a DynamoDB client it does not watch yet."""
    settings = Settings(table_name="live-table", ntp_server=None)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        ensure_table(client, settings.table_name)
        check = IamCheck.for_function("PollerFunction", settings, template=sam_template).warm()
        try:
            yield check, client
        finally:
            check.uninstall()


def test_the_live_check_lets_granted_calls_through_and_refuses_the_others(poller_check: tuple[IamCheck, Any]) -> None:
    check, client = poller_check
    asked = check.judge.asked
    check.watch(client)
    # When the poller's client reads items (granted)  Then the calls go through, decided when the check was warmed
    for n in range(3):
        client.get_item(TableName="live-table", Key={"task_id": {"S": f"t{n}"}})
    assert check.judge.asked == asked
    # When it deletes an item or scans the table (never granted)  Then AWS's AccessDeniedException is raised before
    # anything is sent, naming the function, its role, the call and the grant it lacks
    with pytest.raises(IamDeniedError) as denied:
        client.delete_item(TableName="live-table", Key={"task_id": {"S": "t1"}})
    error = denied.value.response["Error"]
    assert error["Code"] == "AccessDeniedException"
    for part in (
        "PollerFunction",
        "PollerRole",
        "dynamodb:DeleteItem",
        "arn:aws:dynamodb:us-east-1:123456789012:table/live-table",
        "missing grant",
    ):
        assert part in error["Message"]
    with pytest.raises(IamDeniedError, match="dynamodb:Scan"):
        client.scan(TableName="live-table")


def test_installed_the_check_watches_every_client_made_afterwards(poller_check: tuple[IamCheck, Any]) -> None:
    check, _ = poller_check
    check.install()
    watched = boto3.client("dynamodb", region_name="us-east-1")
    with pytest.raises(IamDeniedError):
        watched.delete_item(TableName="live-table", Key={"task_id": {"S": "t1"}})
    # ... and, uninstalled, no client made afterwards
    check.uninstall()
    boto3.client("dynamodb", region_name="us-east-1").delete_item(TableName="live-table", Key={"task_id": {"S": "t1"}})


def test_a_request_made_without_boto3_is_judged_too(poller_check: tuple[IamCheck, Any]) -> None:
    # Given the poller's check  When the local invoker stands for its invoke of the executor's alias  Then it passes;
    # an invoke of the function itself (not granted: only the alias is) is refused
    check, _ = poller_check
    alias = "arn:aws:lambda:us-east-1:123456789012:function:punctual-executor:live"
    check.authorize_request(AccessRequest("lambda:InvokeFunction", alias))
    check.authorize_executor_invoke()
    with pytest.raises(IamDeniedError):
        check.authorize_request(AccessRequest("lambda:InvokeFunction", alias.rsplit(":", 1)[0]))


@pytest.mark.parametrize(
    ("value", "enabled"), [("1", True), ("true", True), ("on", True), ("", False), ("0", False), ("no", False)]
)
def test_the_check_is_opt_in(value: str, enabled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUNCTUAL_IAM_CHECK", value)
    assert check_enabled() is enabled
    if not enabled:
        assert install_iam_check("PollerFunction") is None
