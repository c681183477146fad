"""What CloudFormation gets from template.yaml after the SAM transform: code packaging, triggers, async
invoke settings, queues, and least-privilege IAM."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from template_tools import ROOT, as_list, evaluate_condition, grants, resource_ref, role_statements

from punctual.executor import MAX_ACTION_TIMEOUT_MS

FUNCTIONS = {"PollerFunction": "src/poller/", "ExecutorFunction": "src/executor/", "FastPathFunction": "src/fastpath/"}
FAST_PATH_PATTERN = (
    '{"eventName": ["INSERT", "MODIFY"], "dynamodb": {"NewImage": {"status": {"S": ["PENDING"]}, '
    '"fast_path": {"N": ["1"]}}}}'
)
TABLE = "TasksTable.Arn"
DUE_INDEX = "${TasksTable.Arn}/index/due"
EXECUTOR = "ExecutorFunction.Arn"
TRACES = {("xray:PutTraceSegments", "*"), ("xray:PutTelemetryRecords", "*")}
# Actions without resource-level permissions: the only ones allowed on "*" (and only on "*": the Service
# Authorization Reference lists no resource type for them, so an ARN in Resource would never match).
FORCED_WILDCARD_ACTIONS = {"xray:PutTraceSegments", "xray:PutTelemetryRecords", "dynamodb:ListStreams"}
# Which DynamoDB resource type a grant's resource is, as the Service Authorization Reference names them.
DYNAMODB_RESOURCE_TYPES = {TABLE: "table", DUE_INDEX: "index", "TasksTable.StreamArn": "stream"}


def _of_type(resources: dict[str, Any], kind: str) -> dict[str, Any]:
    return {name: r for name, r in resources.items() if r["Type"] == kind}


def _role_of(cfn_resources: dict[str, Any], function: str) -> dict[str, Any]:
    role = cfn_resources[function]["Properties"]["Role"]
    assert set(role) == {"Fn::GetAtt"}, f"{function} must use a role defined in the template"
    return cfn_resources[role["Fn::GetAtt"][0]]


def _logs(group: str) -> set[tuple[str, str]]:
    return {("logs:CreateLogStream", f"{group}.Arn"), ("logs:PutLogEvents", f"{group}.Arn")}


# -- code ----------------------------------------------------------------------------------------------
def test_the_three_functions_run_their_handler_on_the_shared_layer(cfn_resources: dict[str, Any]) -> None:
    # Given the transformed template  Then each function ships only its own directory, runs app.handler on
    # python3.11/arm64 with tracing, and loads the one shared layer
    (layer_name, layer), = _of_type(cfn_resources, "AWS::Lambda::LayerVersion").items()
    assert layer["Properties"]["Content"]["S3Key"] == "src/shared/"
    functions = _of_type(cfn_resources, "AWS::Lambda::Function")
    assert set(functions) == set(FUNCTIONS)
    for name, code_dir in FUNCTIONS.items():
        props = functions[name]["Properties"]
        assert props["Code"]["S3Key"] == code_dir
        assert props["Handler"] == "app.handler"
        assert (props["Runtime"], props["Architectures"]) == ("python3.11", ["arm64"])
        assert props["TracingConfig"] == {"Mode": "Active"}
        assert props["Layers"] == [{"Ref": layer_name}]
        assert props["LoggingConfig"]["LogGroup"]["Ref"] in cfn_resources


def test_the_layer_is_built_by_sam_for_the_functions_runtime(sam_resources: dict[str, Any]) -> None:
    # Given the SharedLayer as written  Then `sam build` builds it (python3.11 on arm64, like the functions)
    layer = sam_resources["SharedLayer"]
    assert layer["Metadata"] == {"BuildMethod": "python3.11", "BuildArchitecture": "arm64"}
    assert layer["Properties"]["CompatibleRuntimes"] == ["python3.11"]
    assert layer["Properties"]["CompatibleArchitectures"] == ["arm64"]
    assert (ROOT / "src/shared/requirements.txt").is_file()


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_each_code_directory_defines_the_handler(function: str) -> None:
    # Given a function's code directory  Then its app.py defines `handler` (read, not imported)
    app = ROOT / FUNCTIONS[function] / "app.py"
    tree = ast.parse(app.read_text(encoding="utf-8"))
    assert "handler" in {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


# -- triggers ------------------------------------------------------------------------------------------
def test_the_poller_runs_every_minute_and_is_not_retried(cfn_resources: dict[str, Any]) -> None:
    # Given the transformed template  Then one rule at rate(1 minute) targets the poller, and a failed poll
    # is not retried (the next tick polls again, overdue tasks included)
    rules = _of_type(cfn_resources, "AWS::Events::Rule")
    assert [(r["Properties"]["ScheduleExpression"], [t["Arn"] for t in r["Properties"]["Targets"]])
            for r in rules.values()] == [("rate(1 minute)", [{"Fn::GetAtt": ["PollerFunction", "Arn"]}])]
    config = cfn_resources["PollerFunctionEventInvokeConfig"]["Properties"]
    assert config["MaximumRetryAttempts"] == 0
    assert cfn_resources["PollerFunction"]["Properties"]["Timeout"] < 60


def test_the_fast_path_reads_the_stream_through_the_filter(cfn_resources: dict[str, Any],
                                                             sam_resources: dict[str, Any]) -> None:
    # Given the transformed template  Then one event source mapping feeds the table stream to the fast path,
    # filtered to pending fast-path writes, from LATEST, unbatched, with bounded retries
    mappings = _of_type(cfn_resources, "AWS::Lambda::EventSourceMapping")
    assert list(mappings) == ["FastPathFunctionTaskStream"]
    props = mappings["FastPathFunctionTaskStream"]["Properties"]
    assert props["EventSourceArn"] == {"Fn::GetAtt": ["TasksTable", "StreamArn"]}
    assert props["FunctionName"] == {"Ref": "FastPathFunction"}
    assert props["FilterCriteria"] == {"Filters": [{"Pattern": FAST_PATH_PATTERN}]}
    assert json.loads(FAST_PATH_PATTERN)  # valid JSON
    assert props["StartingPosition"] == "LATEST"
    assert props["MaximumBatchingWindowInSeconds"] == 0
    assert props["BisectBatchOnFunctionError"] is True
    assert 0 <= props["MaximumRetryAttempts"] <= 10
    assert 60 <= props["MaximumRecordAgeInSeconds"] <= 600
    # ... and the local runtime finds the pattern where it reads it
    event = sam_resources["FastPathFunction"]["Properties"]["Events"]["TaskStream"]
    assert event["Type"] == "DynamoDB"
    assert event["Properties"]["FilterCriteria"]["Filters"][0]["Pattern"] == FAST_PATH_PATTERN


def test_the_table_stream_carries_new_images(sam_resources: dict[str, Any]) -> None:
    props = sam_resources["TasksTable"]["Properties"]
    assert props["StreamSpecification"] == {"StreamViewType": "NEW_IMAGE"}
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}


# -- executor --------------------------------------------------------------------------------------------
def test_the_executor_timeout_covers_the_longest_lead_and_action(sam_template: dict[str, Any],
                                                                 cfn_resources: dict[str, Any]) -> None:
    # Given the largest LeadMs the template accepts  Then the executor's timeout covers waiting that long,
    # running the longest action, and 30 s more for cold start, arming and recording
    max_lead_ms = sam_template["Parameters"]["LeadMs"]["MaxValue"]
    timeout_ms = cfn_resources["ExecutorFunction"]["Properties"]["Timeout"] * 1000
    assert timeout_ms >= max_lead_ms + MAX_ACTION_TIMEOUT_MS + 30_000
    assert timeout_ms <= 900_000


def test_failed_executor_invocations_go_to_the_failure_queue(cfn_resources: dict[str, Any]) -> None:
    # Given the transformed template  Then async invocations of the executor are retried a bounded number of
    # times, dropped past a bounded age, and what is given up on lands in ExecutorFailureQueue
    config = cfn_resources["ExecutorFunctionEventInvokeConfig"]["Properties"]
    assert config["FunctionName"] == {"Ref": "ExecutorFunction"}
    assert 0 <= config["MaximumRetryAttempts"] <= 2
    assert 60 <= config["MaximumEventAgeInSeconds"] <= 21_600
    assert config["DestinationConfig"] == {
        "OnFailure": {"Destination": {"Fn::GetAtt": ["ExecutorFailureQueue", "Arn"]}}
    }


def test_both_queues_are_encrypted_and_keep_messages(cfn_resources: dict[str, Any]) -> None:
    queues = _of_type(cfn_resources, "AWS::SQS::Queue")
    assert set(queues) == {"TaskDeadLetterQueue", "ExecutorFailureQueue"}
    for queue in queues.values():
        assert queue["Properties"]["SqsManagedSseEnabled"] is True
        assert 60 <= queue["Properties"]["MessageRetentionPeriod"] <= 1_209_600


@pytest.mark.parametrize(("value", "reserved"), [("0", False), ("", False), ("25", True)])
def test_reserved_concurrency_is_set_only_when_asked(sam_template: dict[str, Any], cfn_resources: dict[str, Any],
                                                     value: str, reserved: bool) -> None:
    # Given ExecutorReservedConcurrency = value  Then the executor reserves it, or nothing for 0 / empty
    prop = cfn_resources["ExecutorFunction"]["Properties"]["ReservedConcurrentExecutions"]
    assert prop == {"Fn::If": ["HasReservedConcurrency", {"Ref": "ExecutorReservedConcurrency"},
                               {"Ref": "AWS::NoValue"}]}
    params = {"ExecutorReservedConcurrency": value}
    assert evaluate_condition(sam_template, "HasReservedConcurrency", params) is reserved


# -- IAM --------------------------------------------------------------------------------------------------
def test_no_role_gets_a_managed_policy(cfn_resources: dict[str, Any]) -> None:
    # Given the transformed template  Then every role is one the template writes, with inline policies only
    # (SAM would otherwise attach AWSLambdaBasicExecutionRole, AWSXrayWriteOnlyAccess and
    # AWSLambdaDynamoDBExecutionRole, all on "*")
    roles = _of_type(cfn_resources, "AWS::IAM::Role")
    assert set(roles) == {"PollerRole", "ExecutorRole", "FastPathRole"}
    for name, role in roles.items():
        assert "ManagedPolicyArns" not in role["Properties"], name
    assert set(_of_type(cfn_resources, "AWS::IAM::Policy")) == {"PollerFanOutPolicy"}  # see the next test
    assert not _of_type(cfn_resources, "AWS::IAM::ManagedPolicy")


def test_only_a_fanned_out_poller_may_invoke_itself(sam_template: dict[str, Any],
                                                    cfn_resources: dict[str, Any]) -> None:
    # Given the one policy outside the roles (the poller's role cannot name its own function: a cycle)
    policy = cfn_resources["PollerFanOutPolicy"]
    # Then it exists only with more than one poll group, is the poller role's, and lets it invoke itself only
    assert policy["Condition"] == "HasPollGroups"
    assert not evaluate_condition(sam_template, "HasPollGroups", {})
    assert evaluate_condition(sam_template, "HasPollGroups", {"PollGroups": "4"})
    assert policy["Properties"]["Roles"] == [{"Ref": "PollerRole"}]
    statements = [policy["Properties"]["PolicyDocument"]["Statement"]]
    assert grants([s for group in statements for s in as_list(group)]) == {
        ("lambda:InvokeFunction", "PollerFunction.Arn")}


# Secrets a task names by reference, readable by the executor under the prefixes punctual.secrets allows only.
TASK_SECRETS = {
    "ssm:GetParameter": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter/punctual/*",
    "secretsmanager:GetSecretValue":
        "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:punctual/*",
}


def test_every_grant_names_a_resource_of_the_stack(cfn_resources: dict[str, Any]) -> None:
    # Given every Allow statement of every role, under every condition  Then no action is a wildcard, and
    # every resource is an ARN of a resource in this stack (GetAtt / Ref / Sub of one), or the
    # ActionTargetArns allowlist; "*" only for the actions AWS offers no resource-level permission for
    for name, role in _of_type(cfn_resources, "AWS::IAM::Role").items():
        for action, resource in grants(role_statements(role)):
            assert "*" not in action, f"{name}: wildcard action {action}"
            if resource == "*":
                assert action in FORCED_WILDCARD_ACTIONS, f"{name}: {action} on *"
            elif resource.startswith("Ref:"):
                assert resource[4:] in cfn_resources or resource == "Ref:ActionTargetArns", f"{name}: {resource}"
            elif resource in TASK_SECRETS.values():
                assert name == "ExecutorRole", f"{name}: {action} on {resource}"
            elif resource.startswith("${"):
                assert resource[2:].split(".")[0].split("}")[0] in cfn_resources, f"{name}: {resource}"
            else:
                assert resource.split(".")[0] in cfn_resources, f"{name}: {action} on {resource}"


def test_the_poller_may_read_the_index_and_tasks_and_invoke_the_executor(cfn_resources: dict[str, Any]) -> None:
    statements = role_statements(_role_of(cfn_resources, "PollerFunction"))
    assert grants(statements) == {
        ("dynamodb:Query", DUE_INDEX), ("dynamodb:Scan", DUE_INDEX),
        ("dynamodb:GetItem", TABLE), ("dynamodb:BatchGetItem", TABLE), ("dynamodb:UpdateItem", TABLE),
        ("lambda:InvokeFunction", EXECUTOR),
    } | _logs("PollerLogGroup") | TRACES


def test_the_fast_path_may_read_its_stream_and_invoke_the_executor(cfn_resources: dict[str, Any]) -> None:
    # Given the fast path's role  Then it reads this table's stream only (ListStreams, which lists without
    # reading, on "*": it has no resource-level permission), and has no access to the table itself: it only
    # hands the records' tasks to executors
    statements = role_statements(_role_of(cfn_resources, "FastPathFunction"))
    stream = "TasksTable.StreamArn"
    assert grants(statements) == {
        ("dynamodb:DescribeStream", stream), ("dynamodb:GetRecords", stream), ("dynamodb:GetShardIterator", stream),
        ("dynamodb:ListStreams", "*"),
        ("lambda:InvokeFunction", EXECUTOR),
    } | _logs("FastPathLogGroup") | TRACES


def _authorization_reference() -> dict[str, Any]:
    """cfn-lint's offline copy of the Service Authorization Reference: per service prefix, each action (lower
    case) with the resource types it accepts (none: the action has no resource-level permission)."""
    import cfnlint

    path = Path(cfnlint.__file__).parent / "data" / "AdditionalSpecs" / "Policies.json"
    return json.loads(path.read_text(encoding="utf-8"))


def test_every_grant_is_written_the_way_iam_evaluates_it(cfn_resources: dict[str, Any]) -> None:
    # Given every Allow of every role, and the Service Authorization Reference  Then each action exists; an
    # action without resource types is granted on "*" (an ARN would never match it) and is one of
    # FORCED_WILDCARD_ACTIONS; one with resource types never on "*"; and a DynamoDB grant names a resource of a
    # type the action accepts (table, index or stream)
    reference = _authorization_reference()
    for name, role in _of_type(cfn_resources, "AWS::IAM::Role").items():
        for action, resource in grants(role_statements(role)):
            service, _, verb = action.partition(":")
            assert verb.lower() in reference[service]["Actions"], f"{name}: no such action {action}"
            types = reference[service]["Actions"][verb.lower()].get("Resources", [])
            if not types:
                assert resource == "*" and action in FORCED_WILDCARD_ACTIONS, f"{name}: {action} on {resource}"
            else:
                assert resource != "*", f"{name}: {action} on *"
            if service == "dynamodb" and types:
                assert DYNAMODB_RESOURCE_TYPES[resource] in types, f"{name}: {action} on {resource}"


def test_the_executor_may_arm_record_and_send_to_its_queues(cfn_resources: dict[str, Any]) -> None:
    statements = role_statements(_role_of(cfn_resources, "ExecutorFunction"))
    allowlisted = {(action, "Ref:ActionTargetArns") for action in (
        "lambda:InvokeFunction", "sqs:GetQueueUrl", "sqs:SendMessage", "sns:Publish", "events:PutEvents")}
    assert grants(statements) == {
        ("dynamodb:GetItem", TABLE), ("dynamodb:BatchGetItem", TABLE), ("dynamodb:UpdateItem", TABLE),
        ("sqs:SendMessage", "TaskDeadLetterQueue.Arn"), ("sqs:SendMessage", "ExecutorFailureQueue.Arn"),
    } | allowlisted | set(TASK_SECRETS.items()) | _logs("ExecutorLogGroup") | TRACES


def test_the_executor_checks_targets_against_the_same_lists_as_the_template(cfn_resources: dict[str, Any]) -> None:
    # Given the executor function  Then its allowlists come from the template's parameters
    variables = cfn_resources["ExecutorFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["PUNCTUAL_ALLOWED_TARGETS"] == {"Ref": "AllowedTargets"}
    assert variables["PUNCTUAL_ALLOWED_TARGET_ARNS"] == {"Fn::Join": [",", {"Ref": "ActionTargetArns"}]}


@pytest.mark.parametrize(("value", "granted"), [("", False), ("arn:aws:sqs:us-east-1:123456789012:q", True),
                                                ("arn:aws:sns:us-east-1:123456789012:a,arn:aws:lambda:x", True)])
def test_action_targets_are_granted_only_when_listed(sam_template: dict[str, Any], cfn_resources: dict[str, Any],
                                                     value: str, granted: bool) -> None:
    # Given ActionTargetArns = value  Then the allowlist policy exists only when the list is not empty
    policies = cfn_resources["ExecutorRole"]["Properties"]["Policies"]
    conditional = [p for p in policies if "Fn::If" in p]
    assert [p["Fn::If"][0] for p in conditional] == ["HasActionTargets"]
    assert conditional[0]["Fn::If"][2] == {"Ref": "AWS::NoValue"}
    assert evaluate_condition(sam_template, "HasActionTargets", {"ActionTargetArns": value}) is granted


def test_queue_policies_only_deny(cfn_resources: dict[str, Any]) -> None:
    # Given the queues' resource policies  Then they grant nothing (they only refuse requests without TLS)
    for policy in _of_type(cfn_resources, "AWS::SQS::QueuePolicy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Deny"
            assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
            assert {resource_ref(r) for r in statement["Resource"]} == {
                "TaskDeadLetterQueue.Arn", "ExecutorFailureQueue.Arn"}


def test_the_outputs_name_what_a_client_and_an_operator_need(cfn_template: dict[str, Any]) -> None:
    outputs = cfn_template["Outputs"]
    assert {"TasksTableName", "Region", "ShardCount", "LeadMs", "MisfireGraceMs", "PollerFunctionName",
            "ExecutorFunctionName", "FastPathFunctionName", "TaskDeadLetterQueueUrl", "ExecutorFailureQueueUrl",
            "DashboardUrl"} <= set(outputs)
    url = outputs["DashboardUrl"]["Value"]["Fn::Sub"]
    assert url.startswith("https://${AWS::Region}.console.aws.amazon.com/cloudwatch/home?region=${AWS::Region}")
    assert url.endswith("#dashboards:name=${Dashboard}")
