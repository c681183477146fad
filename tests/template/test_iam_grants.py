"""Every AWS call each function makes, judged against its role in the transformed template by IAM's own rules.

moto and DynamoDB Local accept any call, so a grant missing from template.yaml would show only in AWS. Here the
scenario of :mod:`iam_scenario` runs every path of every function on moto with each call recorded under the function
that made it; each call becomes the IAM requests AWS would evaluate (a transaction's items each by their kind, a
batch per table, with ``dynamodb:LeadingKeys``), and the evaluator (@cloud-copilot/iam-simulate) decides each under
the function's role, resolved for the scenario's deployment. A refused call fails the test, naming the call, the
function, its role and the missing grant. The other way round, every grant a role states must be used by a recorded
call, unless Lambda itself uses it (logs, traces, the event source mapping's ListStreams, the failure destination).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from iam_scenario import NAMES, ROOT, TARGETS, Outcome, route_pattern, run_scenario, stack

from punctual.domain.model import TaskStatus
from punctual_tools.iam import (
    AwsCall,
    Judge,
    KeyNames,
    RolePolicies,
    Verdict,
    function_roles,
    judge_calls,
    role_policies,
)
from punctual_tools.iam.calls import AccessRequest, requests_of

FUNCTIONS = ["PollerFunction", "ExecutorFunction", "FastPathFunction", "ApiFunction"]
HTTP_METHODS = {"get", "put", "post", "delete", "patch"}
# Grants Lambda uses with a function's role, not the function's code: its log group, X-Ray, the event source
# mapping's ListStreams (the scenario plays its stream reads), the executor's on-failure destination.
LAMBDA_USES = {
    "logs:CreateLogStream",
    "logs:PutLogEvents",
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "dynamodb:ListStreams",
}
FAILURE_DESTINATION = ("sqs:SendMessage", f"arn:aws:sqs:us-east-1:123456789012:{NAMES['ExecutorFailureQueue']}")


@pytest.fixture(scope="module")
def outcome(cfn_template: dict[str, Any]) -> Iterator[Outcome]:
    with run_scenario(cfn_template) as done:
        yield done


@pytest.fixture(scope="module")
def roles(cfn_template: dict[str, Any]) -> dict[str, RolePolicies]:
    return {function: role_policies(cfn_template, function, stack()) for function in FUNCTIONS}


@pytest.fixture(scope="module")
def keys(cfn_template: dict[str, Any]) -> KeyNames:
    return KeyNames.of_table(NAMES["TasksTable"], cfn_template["Resources"]["TasksTable"]["Properties"])


@pytest.fixture(scope="module")
def verdicts(outcome: Outcome, roles: dict[str, RolePolicies], keys: KeyNames) -> list[Verdict]:
    calls = [c for function in FUNCTIONS for c in outcome.calls(function)]
    return judge_calls(calls, roles, Judge(), keys)


# -- the scenario took every path --------------------------------------------------------------------------------
def test_every_route_of_the_api_was_answered_with_success(outcome: Outcome) -> None:
    # Given every route of openapi.json  Then the API function answered at least one request of it with a 2xx
    paths = json.loads((ROOT / "openapi.json").read_text(encoding="utf-8"))["paths"]
    routes = [(verb.upper(), path) for path, item in paths.items() for verb in item if verb in HTTP_METHODS]
    assert routes
    for verb, path in routes:
        pattern = route_pattern(path)
        answered = [status for v, p, status in outcome.api_answers if v == verb and pattern.match(p)]
        assert any(200 <= s < 300 for s in answered), (verb, path, answered)


def test_every_action_kind_fired_and_every_outcome_was_recorded(outcome: Outcome) -> None:
    # Then each kind's task succeeded (the http one with its SSM header and its Secrets Manager signature), the
    # failing one went to the dead-letter queue, the overdue one was missed, the dead executor's were taken over
    for kind in ("http", "log", "lambda", "sqs", "sns", "eventbridge"):
        assert outcome.statuses[f"kind-{kind}"] is TaskStatus.SUCCEEDED, kind
    assert outcome.statuses["kind-failing"] is TaskStatus.FAILED
    assert outcome.dead_letters == 1
    assert outcome.statuses["late"] is TaskStatus.MISSED
    assert outcome.statuses["orphan-0"] is outcome.statuses["orphan-1"] is TaskStatus.SUCCEEDED
    assert sum(r["taken_over"] for r in outcome.executor_reports) == 2
    ok = [h for h in outcome.http_requests if h.get("authorization") == "s3cr3t-token"]
    assert ok
    assert "webhook-signature" in ok[0]
    executor = {(c.service, c.operation) for c in outcome.calls("ExecutorFunction")}
    assert {
        ("lambda", "Invoke"),
        ("sqs", "SendMessage"),
        ("sns", "Publish"),
        ("events", "PutEvents"),
        ("ssm", "GetParameter"),
        ("secretsmanager", "GetSecretValue"),
    } <= executor


def test_the_poller_fanned_out_extended_a_tenants_schedule_and_finished_a_cleanup(outcome: Outcome) -> None:
    assert len(outcome.poll_reports) == 2  # the tick's group and the one it invoked
    assert sum(r["occurrences_created"] for r in outcome.poll_reports) >= 1
    calls = outcome.calls("PollerFunction")
    assert any(
        c.operation == "TransactWriteItems" and any("Put" in i for i in c.params["TransactItems"]) for c in calls
    )
    assert any(c.operation == "Query" and c.params.get("IndexName") == "schedule" for c in calls)
    assert any(c.operation == "Query" and c.params.get("IndexName") == "tenant_active_sharded" for c in calls)
    assert outcome.fast_path_reports[0]["dispatched"] >= 1


# -- what the roles allow ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_call_of_the_function_is_allowed_by_its_role(
    verdicts: list[Verdict], outcome: Outcome, function: str
) -> None:
    # Given every call the function made in the scenario  Then IAM allows each under the function's role
    assert outcome.calls(function), f"{function} made no call"
    denied: dict[tuple[str, str], list[Verdict]] = {}
    for verdict in (v for v in verdicts if v.role.function == function and not v.decision.allowed):
        denied.setdefault((verdict.request.action, verdict.request.resource), []).append(verdict)
    assert not denied, "\n".join(
        f"{found[0].describe()} ({len(found)} request(s) like it)" for found in denied.values()
    )


def _arn_like(pattern: str, value: str) -> bool:
    return (
        re.fullmatch("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), value)
        is not None
    )


@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_grant_of_the_role_is_used(
    verdicts: list[Verdict], roles: dict[str, RolePolicies], function: str
) -> None:
    # Given each Allow statement of the function's role, taken alone  Then each of its actions, and each of its
    # resources, is needed by a call the function made (or by Lambda itself): the role grants nothing unused
    role = roles[function]
    requests = sorted(
        {v.request.only(()) for v in verdicts if v.role.function == function and v.decision.allowed},
        key=lambda r: (r.action, r.resource),
    )
    statements = [s for s in role.statements if s["Effect"] == "Allow"]
    alone = [
        RolePolicies(
            function,
            role.role,
            role.principal,
            ({"name": f"statement-{n}", "policy": {"Version": "2012-10-17", "Statement": [statement]}},),
        )
        for n, statement in enumerate(statements)
    ]
    decisions = iter(Judge().decide([(each, r) for each in alone for r in requests]))  # one evaluator run
    unused: list[str] = []
    for statement in statements:
        allowed = [r for r in requests if next(decisions).allowed]
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        for action in actions:
            lambda_only = action in LAMBDA_USES or all((action, r) == FAILURE_DESTINATION for r in resources)
            if not lambda_only and not any(r.action == action for r in allowed):
                unused.append(f"{statement.get('Sid')}: {action}")
        for resource in resources:
            lambda_only = all(a in LAMBDA_USES or (a, resource) == FAILURE_DESTINATION for a in actions)
            if not lambda_only and not any(_arn_like(resource, r.resource) for r in allowed):
                unused.append(f"{statement.get('Sid')}: {resource}")
    assert not unused, f"{role.role} grants what no call of {function} needs: {unused}"


def test_the_transform_leaves_every_role_as_written(sam_template: dict[str, Any], cfn_template: dict[str, Any]) -> None:
    # Given the template as written and as CloudFormation gets it  Then each function runs with the same role, and
    # each role holds the same statements: the live check (punctual_tools.iam.live), which reads the template as
    # written, judges what a deployed stack holds
    assert function_roles(sam_template) == function_roles(cfn_template)
    for function in FUNCTIONS:
        assert role_policies(sam_template, function, stack()) == role_policies(cfn_template, function, stack())


def test_the_action_targets_the_scenario_uses_are_the_granted_ones(roles: dict[str, RolePolicies]) -> None:
    # Given the ActionTargetArns of the scenario's deployment  Then the executor's role names exactly these
    statements = [s for s in roles["ExecutorFunction"].statements if s.get("Sid") == "ActOnAllowedTargets"]
    assert [sorted(s["Resource"]) for s in statements] == [sorted(TARGETS.values())]


def test_a_transaction_needs_the_action_of_each_item(keys: KeyNames) -> None:
    # Given a transaction as the poller writes it (the schedule's Update, an occurrence's Put)  Then IAM is asked
    # for UpdateItem and PutItem on the table, each with the item's key: TransactWriteItems is no IAM action

    table = NAMES["TasksTable"]
    call = AwsCall(
        "dynamodb",
        "TransactWriteItems",
        {
            "TransactItems": [
                {"Update": {"TableName": table, "Key": {"task_id": {"S": "#schedule#s"}}}},
                {"Put": {"TableName": table, "Item": {"task_id": {"S": "s@20300101T000000.000Z"}, "x": {"N": "1"}}}},
                {"ConditionCheck": {"TableName": table, "Key": {"task_id": {"S": "c"}}}},
                {"Delete": {"TableName": table, "Key": {"task_id": {"S": "d"}}}},
            ]
        },
        "us-east-1",
    )
    arn = f"arn:aws:dynamodb:us-east-1:123456789012:table/{table}"
    assert [(r.action, r.resource, r.context) for r in requests_of(call, keys)] == [
        ("dynamodb:UpdateItem", arn, (("dynamodb:LeadingKeys", ("#schedule#s",)),)),
        ("dynamodb:PutItem", arn, (("dynamodb:LeadingKeys", ("s@20300101T000000.000Z",)),)),
        ("dynamodb:ConditionCheckItem", arn, (("dynamodb:LeadingKeys", ("c",)),)),
        ("dynamodb:DeleteItem", arn, (("dynamodb:LeadingKeys", ("d",)),)),
    ]
    assert AccessRequest("dynamodb:PutItem", arn).account == "123456789012"
