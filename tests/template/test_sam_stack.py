"""What CloudFormation gets from template.yaml after the SAM transform: code packaging, triggers, async
invoke settings, queues, the REST API, and least-privilege IAM."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import cfnlint
import pytest
from template_tools import (
    ROOT,
    as_list,
    decide,
    evaluate_condition,
    grants,
    resource_ref,
    role_statements,
    string_like,
    sub_text,
)

from punctual.domain import tenancy
from punctual.domain.model import occurrence_id
from punctual.executing.executor import MAX_ACTION_TIMEOUT_MS
from punctual.scheduling.bulk import BATCH_MAX_TASKS
from punctual.stores.dynamodb.codec import schedule_id_of_key, schedule_key

FUNCTIONS = {
    "PollerFunction": "src/poller/",
    "ExecutorFunction": "src/executor/",
    "FastPathFunction": "src/fastpath/",
    "ApiFunction": "src/api/",
}
FAST_PATH_PATTERN = '{"dynamodb": {"NewImage": {"status": {"S": ["PENDING"]}, "fast_path": {"N": ["1"]}}}}'
TABLE = "TasksTable.Arn"
DUE_INDEX = "${TasksTable.Arn}/index/due"
SCHEDULE_INDEX = "${TasksTable.Arn}/index/schedule"
TENANT_INDEX = "${TasksTable.Arn}/index/tenant"
TENANT_ACTIVE_INDEX = "${TasksTable.Arn}/index/tenant_active_sharded"
# Actions without resource-level permissions: the only ones allowed on "*" (and only on "*": the Service
# Authorization Reference lists no resource type for them, so an ARN in Resource would never match).
FORCED_WILDCARD_ACTIONS = {"xray:PutTraceSegments", "xray:PutTelemetryRecords", "dynamodb:ListStreams"}
# Which DynamoDB resource type a grant's resource is, as the Service Authorization Reference names them.
DYNAMODB_RESOURCE_TYPES = {
    TABLE: "table",
    DUE_INDEX: "index",
    SCHEDULE_INDEX: "index",
    TENANT_INDEX: "index",
    TENANT_ACTIVE_INDEX: "index",
    "TasksTable.StreamArn": "stream",
}


def _of_type(resources: dict[str, Any], kind: str) -> dict[str, Any]:
    return {name: r for name, r in resources.items() if r["Type"] == kind}


def _role_of(cfn_resources: dict[str, Any], function: str) -> dict[str, Any]:
    role = cfn_resources[function]["Properties"]["Role"]
    assert set(role) == {"Fn::GetAtt"}, f"{function} must use a role defined in the template"
    result: dict[str, Any] = cfn_resources[role["Fn::GetAtt"][0]]
    return result


# -- code ----------------------------------------------------------------------------------------------
def test_every_function_runs_its_handler_on_the_shared_layer(cfn_resources: dict[str, Any]) -> None:
    # Given the transformed template  Then each function ships only its own directory, runs app.handler on
    # python3.11/arm64 with tracing, and loads the one shared layer
    ((layer_name, layer),) = _of_type(cfn_resources, "AWS::Lambda::LayerVersion").items()
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
    assert [
        (r["Properties"]["ScheduleExpression"], [t["Arn"] for t in r["Properties"]["Targets"]]) for r in rules.values()
    ] == [("rate(1 minute)", [{"Fn::GetAtt": ["PollerFunction", "Arn"]}])]
    config = cfn_resources["PollerFunctionEventInvokeConfig"]["Properties"]
    assert config["MaximumRetryAttempts"] == 0
    assert cfn_resources["PollerFunction"]["Properties"]["Timeout"] < 60


def test_the_fast_path_reads_the_stream_through_the_filter(
    cfn_resources: dict[str, Any], sam_resources: dict[str, Any]
) -> None:
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
    assert props["BillingMode"] == {"Ref": "TableBillingMode"}  # on demand by default (test_table_capacity.py)
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}


# -- executor --------------------------------------------------------------------------------------------
def test_the_executor_timeout_covers_the_longest_lead_and_action(
    sam_template: dict[str, Any], cfn_resources: dict[str, Any]
) -> None:
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
    assert config["Qualifier"] == "live"  # on the alias the poller and the fast path invoke
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


RESERVATIONS = {
    "ExecutorFunction": ("ExecutorReservedConcurrency", "HasExecutorReservation"),
    "PollerFunction": ("PollerReservedConcurrency", "HasPollerReservation"),
    "ApiFunction": ("ApiReservedConcurrency", "HasApiReservation"),
}


@pytest.mark.parametrize("function", sorted(RESERVATIONS))
@pytest.mark.parametrize(("value", "reserved"), [("0", False), ("", False), ("25", True)])
def test_reserved_concurrency_is_set_only_when_asked(
    sam_template: dict[str, Any], cfn_resources: dict[str, Any], function: str, value: str, reserved: bool
) -> None:
    # Given the function's reservation parameter = value  Then the function reserves it, or nothing for 0 / empty
    parameter, condition = RESERVATIONS[function]
    prop = cfn_resources[function]["Properties"]["ReservedConcurrentExecutions"]
    assert prop == {"Fn::If": [condition, {"Ref": parameter}, {"Ref": "AWS::NoValue"}]}
    assert evaluate_condition(sam_template, condition, {parameter: value}) is reserved


@pytest.mark.parametrize("parameter", sorted(p for p, _ in RESERVATIONS.values()))
@pytest.mark.parametrize(("value", "accepted"), [("", True), ("0", True), ("7", True), ("100", True), ("00", False)])
def test_a_reservation_parameter_takes_a_count_or_nothing(
    sam_template: dict[str, Any], parameter: str, value: str, accepted: bool
) -> None:
    # Given a reservation parameter's pattern  Then it takes empty, 0 or a count, never "00" (a reservation of 0,
    # which Lambda reads as "never run the function")
    pattern = sam_template["Parameters"][parameter]["AllowedPattern"]
    assert bool(re.fullmatch(pattern, value)) is accepted


# -- IAM --------------------------------------------------------------------------------------------------
def test_no_role_gets_a_managed_policy(cfn_resources: dict[str, Any]) -> None:
    # Given the transformed template  Then every role is one the template writes, with inline policies only
    # (SAM would otherwise attach AWSLambdaBasicExecutionRole, AWSXrayWriteOnlyAccess and
    # AWSLambdaDynamoDBExecutionRole, all on "*")
    roles = _of_type(cfn_resources, "AWS::IAM::Role")
    assert set(roles) == {
        "PollerRole",
        "ExecutorRole",
        "FastPathRole",
        "ApiRole",
        "TenantDirectClientRole",
        "ExecutorDeploymentRole",
    }
    for name, role in roles.items():
        assert "ManagedPolicyArns" not in role["Properties"], name
    assert set(_of_type(cfn_resources, "AWS::IAM::Policy")) == {"PollerFanOutPolicy"}  # see the next test
    assert not _of_type(cfn_resources, "AWS::IAM::ManagedPolicy")


def test_only_a_fanned_out_poller_may_invoke_itself(
    sam_template: dict[str, Any], cfn_resources: dict[str, Any]
) -> None:
    # Given the one policy outside the roles (the poller's role cannot name its own function: a cycle)
    policy = cfn_resources["PollerFanOutPolicy"]
    # Then it exists only with more than one poll group, is the poller role's, and lets it invoke itself only
    assert policy["Condition"] == "HasPollGroups"
    assert not evaluate_condition(sam_template, "HasPollGroups", {})
    assert evaluate_condition(sam_template, "HasPollGroups", {"PollGroups": "4"})
    assert policy["Properties"]["Roles"] == [{"Ref": "PollerRole"}]
    statements = [policy["Properties"]["PolicyDocument"]["Statement"]]
    assert grants([s for group in statements for s in as_list(group)]) == {
        ("lambda:InvokeFunction", "PollerFunction.Arn")
    }


# The tenant map's parameter (TenantMapParameter, a name starting with "/"), readable by the API and the executor.
TENANT_MAP_PARAMETER = "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter${TenantMapParameter}"
TENANT_MAP_PATH = "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter${TenantMapPath}"
# Parameters that list ARNs a role is granted on: the action targets, their keys, the table's key.
GRANTED_PARAMETERS = {"Ref:ActionTargetArns", "Ref:ActionTargetKmsKeyArns", "Ref:TableKmsKeyArn"}
# Secrets a task names by reference, readable by the executor under the prefixes punctual.targets.secrets allows only.
TASK_SECRETS = {
    "ssm:GetParameter": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter/punctual/*",
    "secretsmanager:GetSecretValue": (
        "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:punctual/*"
    ),
}


MAP_READERS = ("ExecutorRole", "ApiRole", "PollerRole")  # the roles that read the tenant map where it is kept


def test_every_grant_names_a_resource_of_the_stack(cfn_resources: dict[str, Any]) -> None:
    # Given every Allow statement of every role, under every condition  Then no action is a wildcard, and
    # every resource is an ARN of a resource in this stack (GetAtt / Ref / Sub of one), one the operator lists
    # (GRANTED_PARAMETERS), or the tenant map's parameter; "*" only for the actions AWS offers no resource-level
    # permission for
    for name, role in _of_type(cfn_resources, "AWS::IAM::Role").items():
        for action, resource in grants(role_statements(role)):
            assert "*" not in action, f"{name}: wildcard action {action}"
            if resource == "*":
                assert action in FORCED_WILDCARD_ACTIONS, f"{name}: {action} on *"
            elif resource.startswith("Ref:"):
                assert resource[4:] in cfn_resources or resource in GRANTED_PARAMETERS, f"{name}: {resource}"
            elif resource in TASK_SECRETS.values():
                assert name == "ExecutorRole", f"{name}: {action} on {resource}"
            elif resource == TENANT_MAP_PARAMETER:
                assert name in MAP_READERS, (name, action)
                assert action == "ssm:GetParameter", (name, action)
            elif resource == TENANT_MAP_PATH:
                assert name in MAP_READERS, (name, action)
                assert action == "ssm:GetParametersByPath", (name, action)
            elif resource.startswith("${"):
                assert resource[2:].split(".")[0].split("}")[0] in cfn_resources, f"{name}: {resource}"
            else:
                assert resource.split(".")[0] in cfn_resources, f"{name}: {action} on {resource}"


# What each function's role never grants, whatever a call may seem to need. What a role lacks and what it grants
# unused, test_iam_grants.py finds by running every path of every function and judging each call it makes; these
# are the lines least privilege draws beyond what the calls show.
NEVER_GRANTED = {
    # Every role: no item is deleted (TTL does it), nothing written in bulk, no table or index changed, no PartiQL.
    "*": {
        "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:DeleteTable",
        "dynamodb:UpdateTable",
        "dynamodb:CreateTable",
        "dynamodb:PartiQLSelect",
        "dynamodb:PartiQLInsert",
        "dynamodb:PartiQLUpdate",
        "dynamodb:PartiQLDelete",
    },
    # (the poller reads one parameter: the tenant map's, to admit schedules' occurrences; see the next test)
    "PollerFunction": {"sqs:SendMessage", "secretsmanager:GetSecretValue"},
    # The executor arms and records what exists: it never creates an item, nor reads an index.
    "ExecutorFunction": {"dynamodb:PutItem", "dynamodb:Query", "dynamodb:Scan"},
    # (the API reads one parameter: the tenant map's, when TenantMapParameter names one; see the next test)
    "ApiFunction": {
        "lambda:InvokeFunction",
        "dynamodb:Scan",
        "sqs:SendMessage",
        "secretsmanager:GetSecretValue",
    },
}


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_no_role_grants_what_its_function_must_never_do(cfn_resources: dict[str, Any], function: str) -> None:
    statements = role_statements(_role_of(cfn_resources, function))
    granted = grants(statements)
    actions = {action for action, _ in granted}
    assert not actions & (NEVER_GRANTED["*"] | NEVER_GRANTED.get(function, set()))
    if function in ("ApiFunction", "PollerFunction"):
        assert {resource for action, resource in granted if action == "ssm:GetParameter"} == {TENANT_MAP_PARAMETER}
    # A Scan only of the due index (the poller's first poll, to find its watermark), never of the table
    assert {resource for action, resource in granted if action == "dynamodb:Scan"} <= {DUE_INDEX}
    # The fast path reads the stream, and of the table only the pollers' watermark items (when the last polls
    # started): no task, no write (the executors arm what it hands over)
    if function == "FastPathFunction":
        on_table = [s for s in statements if TABLE in {r for _, r in grants([s])}]
        assert {action for s in on_table for action, _ in grants([s])} == {"dynamodb:BatchGetItem"}
        assert [s["Condition"] for s in on_table] == [
            {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["#poller-watermark*"]}}
        ]
    # No condition on a function's grants but on dynamodb:LeadingKeys (recorded calls carry it only: another
    # key's condition could not be judged by test_iam_grants.py)
    assert all(
        set(key for test in statement.get("Condition", {}).values() for key in test) <= {"dynamodb:LeadingKeys"}
        for statement in statements
    )


def _authorization_reference() -> dict[str, Any]:
    """cfn-lint's offline copy of the Service Authorization Reference: per service prefix, each action (lower
    case) with the resource types it accepts (none: the action has no resource-level permission)."""

    path = Path(cfnlint.__file__).parent / "data" / "AdditionalSpecs" / "Policies.json"
    result: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return result


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
                assert resource == "*", f"{name}: {action} on {resource}"
                assert action in FORCED_WILDCARD_ACTIONS, f"{name}: {action} on {resource}"
            else:
                assert resource != "*", f"{name}: {action} on *"
            if service == "dynamodb" and types:
                assert DYNAMODB_RESOURCE_TYPES[resource] in types, f"{name}: {action} on {resource}"


def test_the_executor_checks_targets_against_the_same_lists_as_the_template(cfn_resources: dict[str, Any]) -> None:
    # Given the executor function  Then its allowlists come from the template's parameters
    variables = cfn_resources["ExecutorFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["PUNCTUAL_ALLOWED_TARGETS"] == {"Ref": "AllowedTargets"}
    assert variables["PUNCTUAL_ALLOWED_TARGET_ARNS"] == {"Fn::Join": [",", {"Ref": "ActionTargetArns"}]}


@pytest.mark.parametrize(
    ("value", "granted"),
    [
        ("", False),
        ("arn:aws:sqs:us-east-1:123456789012:q", True),
        ("arn:aws:sns:us-east-1:123456789012:a,arn:aws:lambda:x", True),
    ],
)
def test_action_targets_are_granted_only_when_listed(
    sam_template: dict[str, Any], cfn_resources: dict[str, Any], value: str, granted: bool
) -> None:
    # Given ActionTargetArns = value  Then the allowlist policy exists only when the list is not empty
    policies = cfn_resources["ExecutorRole"]["Properties"]["Policies"]
    conditional = {p["Fn::If"][0]: p["Fn::If"] for p in policies if "Fn::If" in p}
    assert set(conditional) == {
        "HasActionTargets",
        "HasActionTargetKeys",
        "HasTenantMapParameter",
        "HasTenantMapPath",
        "HasTableKmsKey",
    }
    assert conditional["HasActionTargets"][2] == {"Ref": "AWS::NoValue"}
    assert evaluate_condition(sam_template, "HasActionTargets", {"ActionTargetArns": value}) is granted


def test_queue_policies_only_deny(cfn_resources: dict[str, Any]) -> None:
    # Given the queues' resource policies  Then they grant nothing (they only refuse requests without TLS)
    for policy in _of_type(cfn_resources, "AWS::SQS::QueuePolicy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Deny"
            assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
            assert {resource_ref(r) for r in statement["Resource"]} == {
                "TaskDeadLetterQueue.Arn",
                "ExecutorFailureQueue.Arn",
            }


def test_the_outputs_name_what_a_client_and_an_operator_need(cfn_template: dict[str, Any]) -> None:
    outputs = cfn_template["Outputs"]
    assert {
        "TasksTableName",
        "Region",
        "ShardCount",
        "LeadMs",
        "PollIntervalMs",
        "MisfireGraceMs",
        "PollerFunctionName",
        "ExecutorFunctionName",
        "FastPathFunctionName",
        "TaskDeadLetterQueueUrl",
        "ExecutorFailureQueueUrl",
        "DashboardUrl",
    } <= set(outputs)
    url = outputs["DashboardUrl"]["Value"]["Fn::Sub"]
    assert url.startswith("https://${AWS::Region}.console.aws.amazon.com/cloudwatch/home?region=${AWS::Region}")
    assert url.endswith("#dashboards:name=${Dashboard}")


# -- REST API ------------------------------------------------------------------------------------------------
STAGE = "prod"
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "x-amazon-apigateway-any-method"}


def _rest_api(cfn_resources: dict[str, Any]) -> dict[str, Any]:
    (api,) = _of_type(cfn_resources, "AWS::ApiGateway::RestApi").values()
    result: dict[str, Any] = api["Properties"]
    return result


def _methods(api: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, verb, method)
        for path, item in api["Body"]["paths"].items()
        for verb, method in item.items()
        if verb in HTTP_METHODS
    ]


def test_every_api_method_requires_a_sigv4_signature(
    sam_resources: dict[str, Any], cfn_resources: dict[str, Any]
) -> None:
    # Given the one REST API, as written and after the transform
    assert sam_resources["Api"]["Properties"]["Auth"]["DefaultAuthorizer"] == "AWS_IAM"
    api = _rest_api(cfn_resources)
    schemes = api["Body"]["components"]["securitySchemes"]
    # Then every method of its definition requires IAM authentication (SigV4), and none is defined elsewhere
    methods = _methods(api)
    assert methods
    for path, verb, method in methods:
        assert method["security"] == [{"AWS_IAM": []}], (path, verb)
    assert schemes["AWS_IAM"]["x-amazon-apigateway-authtype"] == "awsSigv4"
    assert not _of_type(cfn_resources, "AWS::ApiGateway::Method")
    assert not _of_type(cfn_resources, "AWS::ApiGatewayV2::Api")
    # ... and API Gateway calls the function with its own permission, not the caller's credentials (which would
    # make every caller need lambda:InvokeFunction on the function)
    for path, verb, method in methods:
        assert "credentials" not in method["x-amazon-apigateway-integration"], (path, verb)
    # (one permission a method, each for this API and stage only, and for a path under /v1)
    permissions = [
        p["Properties"]
        for p in _of_type(cfn_resources, "AWS::Lambda::Permission").values()
        if p["Properties"]["FunctionName"] == {"Ref": "ApiFunction"}
    ]
    assert len(permissions) == len(methods)
    for permission in permissions:
        assert permission["Principal"] == "apigateway.amazonaws.com"
        source, variables = permission["SourceArn"]["Fn::Sub"]
        assert "${__ApiId__}/${__Stage__}/" in source
        assert variables["__ApiId__"] == {"Ref": "Api"}
        assert source.split("${__ApiId__}/${__Stage__}/")[1].split("/", 1)[1].startswith("v1/")


def _routes() -> set[tuple[str, str]]:
    """``(path, verb)`` of every route of the committed openapi.json, the verb upper-case."""
    paths = json.loads((ROOT / "openapi.json").read_text(encoding="utf-8"))["paths"]
    return {(path, verb.upper()) for path, item in paths.items() for verb in item if verb in HTTP_METHODS}


def _api_methods(cfn_resources: dict[str, Any]) -> set[tuple[str, str]]:
    """``(resource path, verb)`` of every method of the API, ``ANY`` for API Gateway's any-method."""
    return {
        (path, "ANY" if verb == "x-amazon-apigateway-any-method" else verb.upper())
        for path, verb, _ in _methods(_rest_api(cfn_resources))
    }


def test_each_route_is_a_method_of_the_api_and_the_rest_falls_to_a_catch_all(cfn_resources: dict[str, Any]) -> None:
    # Given the API's definition and the committed openapi.json  Then each route of openapi.json is a method of
    # its own (what a stage's method setting can name), one catch-all under /v1 (any method) takes any other
    # path, and every method is proxied to ApiFunction
    routes = _routes()
    assert routes
    assert all(path.startswith("/v1/") for path, _ in routes)
    assert _api_methods(cfn_resources) == routes | {("/v1/{proxy+}", "ANY")}
    for path, verb, method in _methods(_rest_api(cfn_resources)):
        integration = method["x-amazon-apigateway-integration"]
        assert integration["type"] == "aws_proxy", (path, verb)
        assert "${ApiFunction.Arn}" in sub_text(integration["uri"]), (path, verb)


# -- REST API throttling ---------------------------------------------------------------------------------------
# The writes that cost most, throttled tighter than the stage's default: a task, a schedule with its first
# occurrences, and a change of a schedule (which may cancel occurrences).
COSTLY_WRITES = {("/v1/tasks", "POST"), ("/v1/schedules", "POST"), ("/v1/schedules/{schedule_id}", "PATCH")}
DEFAULT_THROTTLE = {"ThrottlingRateLimit": {"Ref": "ApiRateLimit"}, "ThrottlingBurstLimit": {"Ref": "ApiBurstLimit"}}
WRITE_THROTTLE = {
    "ThrottlingRateLimit": {"Ref": "ApiWriteRateLimit"},
    "ThrottlingBurstLimit": {"Ref": "ApiWriteBurstLimit"},
}
# The batch create: up to BATCH_MAX_TASKS tasks a call, under a bucket of its own counted in calls
BATCH_CREATE = ("/v1/tasks:batch", "POST")
BATCH_THROTTLE = {
    "ThrottlingRateLimit": {"Ref": "ApiBatchRateLimit"},
    "ThrottlingBurstLimit": {"Ref": "ApiBatchBurstLimit"},
}


def _method_settings(cfn_resources: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """The stage's method settings by ``(resource path, verb)``. A setting writes ``/`` and then the path with each
    ``/`` as ``~1`` (``~`` as ``~0``): ``/~1v1~1tasks`` is ``/v1/tasks``; the default for every method is ``/*``,
    here ``("*", "*")``."""
    (stage,) = [s["Properties"] for s in _of_type(cfn_resources, "AWS::ApiGateway::Stage").values()]
    settings = {}
    for setting in stage["MethodSettings"]:
        written = setting["ResourcePath"]
        assert written.startswith("/"), written
        path = written[1:].replace("~1", "/").replace("~0", "~")
        settings[(path, setting["HttpMethod"])] = {k: v for k, v in setting.items() if k.startswith("Throttling")}
    assert len(settings) == len(stage["MethodSettings"]), "two settings for one method"
    return settings


def _throttle_of(settings: dict[tuple[str, str], dict[str, Any]], path: str, verb: str) -> dict[str, Any]:
    """The throttle a method gets: its own setting, else the stage's default for every method."""
    return settings.get((path, verb)) or settings[("*", "*")]


def test_every_route_of_the_api_is_throttled(cfn_resources: dict[str, Any]) -> None:
    # Given the stage's method settings  Then a default covers every method (ApiRateLimit / ApiBurstLimit), so
    # every route of openapi.json and the catch-all fall under a rate and a burst, and the costly writes under
    # the tighter write limits
    settings = _method_settings(cfn_resources)
    assert settings[("*", "*")] == DEFAULT_THROTTLE
    assert BATCH_CREATE in _routes()
    for path, verb in _routes() | {("/v1/{proxy+}", "ANY")}:
        expected = WRITE_THROTTLE if (path, verb) in COSTLY_WRITES else DEFAULT_THROTTLE
        expected = BATCH_THROTTLE if (path, verb) == BATCH_CREATE else expected
        assert _throttle_of(settings, path, verb) == expected, (path, verb)


def test_each_route_throttle_names_a_method_of_the_api(cfn_resources: dict[str, Any]) -> None:
    # Given the stage's method settings other than the default  Then each names a route of openapi.json that is a
    # method of the API (a setting naming a path the API answers through its catch-all would throttle nothing)
    own = set(_method_settings(cfn_resources)) - {("*", "*")}
    assert own == COSTLY_WRITES | {BATCH_CREATE}
    assert own <= _routes() & _api_methods(cfn_resources)


def test_the_throttle_parameters_make_writes_the_tighter(sam_template: dict[str, Any]) -> None:
    # Given the four throttle parameters  Then their defaults make the costly writes tighter than the default,
    # every burst at least its rate, and no value exceeds API Gateway's default account quotas (10,000 requests
    # per second, a burst of 5,000 in a region), above which a stage's setting would change nothing
    params = sam_template["Parameters"]
    rate, burst = params["ApiRateLimit"], params["ApiBurstLimit"]
    write_rate, write_burst = params["ApiWriteRateLimit"], params["ApiWriteBurstLimit"]
    assert write_rate["Default"] < rate["Default"]
    assert write_burst["Default"] < burst["Default"]
    assert burst["Default"] >= rate["Default"]
    assert write_burst["Default"] >= write_rate["Default"]
    for parameter in (rate, write_rate):
        assert (parameter["Type"], parameter["MinValue"], parameter["MaxValue"]) == ("Number", 1, 10_000)
    for parameter in (burst, write_burst):
        assert (parameter["Type"], parameter["MinValue"], parameter["MaxValue"]) == ("Number", 1, 5_000)


def test_the_batch_creates_throttle_counts_calls_and_says_how_many_tasks_that_lets_through(
    sam_template: dict[str, Any],
) -> None:
    # Given the batch create's throttle parameters  Then they are in calls, each burst at least its rate, within
    # API Gateway's account quotas, and the rate's description says a call holds up to BATCH_MAX_TASKS tasks and
    # what its default lets through in tasks a second (a call is not budgeted as one task)

    params = sam_template["Parameters"]
    rate, burst = params["ApiBatchRateLimit"], params["ApiBatchBurstLimit"]
    assert burst["Default"] >= rate["Default"]
    assert (rate["Type"], rate["MinValue"], rate["MaxValue"]) == ("Number", 1, 10_000)
    assert (burst["Type"], burst["MinValue"], burst["MaxValue"]) == ("Number", 1, 5_000)
    description = " ".join(rate["Description"].split())
    assert f"up to {BATCH_MAX_TASKS}" in description, description
    assert f"{BATCH_MAX_TASKS * rate['Default']:,} at the default" in description, description


def test_the_api_has_one_traced_stage_and_its_url_is_an_output(
    cfn_template: dict[str, Any], cfn_resources: dict[str, Any]
) -> None:
    # Given the transformed template  Then the API has one stage (not SAM's extra "Stage"), traced, and the
    # outputs give its URL (what ApiClient and PUNCTUAL_API_URL take) and the function's name
    (stage,) = [s["Properties"] for s in _of_type(cfn_resources, "AWS::ApiGateway::Stage").values()]
    assert (stage["StageName"], stage["TracingEnabled"], stage["RestApiId"]) == (STAGE, True, {"Ref": "Api"})
    assert _rest_api(cfn_resources)["EndpointConfiguration"] == {"Types": ["REGIONAL"]}
    outputs = cfn_template["Outputs"]
    assert (
        sub_text(outputs["ApiUrl"]["Value"])
        == f"https://${{Api}}.execute-api.${{AWS::Region}}.${{AWS::URLSuffix}}/{STAGE}"
    )
    assert outputs["ApiFunctionName"]["Value"] == {"Ref": "ApiFunction"}


def test_the_api_function_answers_before_api_gateway_gives_up(cfn_resources: dict[str, Any]) -> None:
    # Given API Gateway's integration timeout (29 s)  Then the function times out before it, so a slow call is
    # the function's own error in its log, not a bare 504
    assert cfn_resources["ApiFunction"]["Properties"]["Timeout"] < 29


@pytest.mark.parametrize(("value", "logged"), [("false", False), ("true", True)])
def test_access_logs_are_written_only_when_asked(
    sam_template: dict[str, Any], cfn_resources: dict[str, Any], value: str, logged: bool
) -> None:
    # Given ApiAccessLogs = value  Then the stage writes JSON access lines (with the request id) to its own log
    # group, kept LogRetentionInDays, only when asked (API Gateway needs the account's CloudWatch role for it)
    (stage,) = [s["Properties"] for s in _of_type(cfn_resources, "AWS::ApiGateway::Stage").values()]
    condition, setting, otherwise = stage["AccessLogSetting"]["Fn::If"]
    assert (condition, otherwise) == ("HasApiAccessLogs", {"Ref": "AWS::NoValue"})
    assert setting["DestinationArn"] == {"Fn::GetAtt": ["ApiAccessLogGroup", "Arn"]}
    assert json.loads(setting["Format"])["requestId"] == "$context.requestId"
    group = cfn_resources["ApiAccessLogGroup"]
    assert group["Condition"] == "HasApiAccessLogs"
    assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionInDays"}
    assert evaluate_condition(sam_template, "HasApiAccessLogs", {"ApiAccessLogs": value}) is logged


def test_the_store_needs_no_other_table_permission() -> None:
    # Given the DynamoDB adapter's source  Then it never deletes an item nor batch-writes, and its transactions
    # hold Put and Update items only, which PutItem and UpdateItem cover (TransactWriteItems is no IAM action)
    source = "\n".join(
        path.read_text(encoding="utf-8") for path in sorted((ROOT / "src/shared/punctual/stores/dynamodb").glob("*.py"))
    )
    assert "transact_write_items(" in source
    for call in (".delete_item(", ".batch_write_item(", ".execute_statement(", '"Delete":', '"ConditionCheck":'):
        assert call not in source, call


def test_the_direct_client_role_is_confined_to_its_tenant(
    sam_template: dict[str, Any], cfn_template: dict[str, Any], cfn_resources: dict[str, Any]
) -> None:
    # Given the example direct-table client role
    role = cfn_resources["TenantDirectClientRole"]
    # Then it exists only when a tenant is named, and the account's principals (that IAM lets) may assume it
    assert role["Condition"] == "HasTenantDirectRole"
    assert not evaluate_condition(sam_template, "HasTenantDirectRole", {})
    assert evaluate_condition(sam_template, "HasTenantDirectRole", {"TenantDirectRoleTenant": "acme"})
    assert cfn_template["Outputs"]["TenantDirectClientRoleArn"]["Condition"] == "HasTenantDirectRole"
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert (trust["Effect"], trust["Action"]) == ("Allow", "sts:AssumeRole")
    assert sub_text(trust["Principal"]["AWS"]) == "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"
    # ... it may only read and put items, each Allow on keys that start with "<tenant>/" (and use the table's key,
    # when the table has a customer managed one)
    statements = role_statements(role)
    assert grants(statements) == {
        (action, TABLE)
        for action in ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:ConditionCheckItem")
    } | {("kms:Decrypt", "Ref:TableKmsKeyArn")}
    for statement in (s for s in statements if s["Effect"] == "Allow" and s["Action"] != "kms:Decrypt"):
        keys = statement["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]
        assert [sub_text(k) for k in keys] == ["${TenantDirectRoleTenant}/*"]
        assert set(statement["Condition"]) == {"ForAllValues:StringLike"}
    # ... and never UpdateItem, Scan or Query (with ForAllValues, a request naming no key passes the condition)
    assert not {a for a, _ in grants(statements)} & {"dynamodb:UpdateItem", "dynamodb:Scan", "dynamodb:Query"}


SCHEDULE_WRITES = {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"}


def test_the_direct_client_role_is_denied_every_write_of_a_schedule(cfn_resources: dict[str, Any]) -> None:
    # Given the direct client role's statements  Then one Deny names every item write on the table, on any key
    # that holds "#schedule#" (ForAnyValue: one such key among those a request names is enough), and no read
    (deny,) = [s for s in role_statements(cfn_resources["TenantDirectClientRole"]) if s["Effect"] == "Deny"]
    assert set(as_list(deny["Action"])) == SCHEDULE_WRITES
    assert [resource_ref(r) for r in as_list(deny["Resource"])] == [TABLE]
    assert deny["Condition"] == {"ForAnyValue:StringLike": {"dynamodb:LeadingKeys": ["*#schedule#*"]}}


# What IAM answers the direct client of tenant "acme" (the keys a request names: its dynamodb:LeadingKeys).
ACME_SCHEDULE = schedule_key(tenancy.qualify("acme", "daily"))  # acme/#schedule#daily
DIRECT_CLIENT_DECISIONS = [
    ("dynamodb:PutItem", ["acme/invoice-1"], "Allowed"),
    ("dynamodb:PutItem", [occurrence_id(tenancy.qualify("acme", "daily"), 1_767_225_600_000)], "Allowed"),
    ("dynamodb:PutItem", [ACME_SCHEDULE], "ExplicitlyDenied"),
    ("dynamodb:PutItem", ["acme/x#schedule#y"], "ExplicitlyDenied"),  # a schedule's key to the store, too
    ("dynamodb:PutItem", ["#schedule#daily"], "ExplicitlyDenied"),
    ("dynamodb:PutItem", ["globex/invoice-1"], "ImplicitlyDenied"),
    ("dynamodb:PutItem", ["acme/#SCHEDULE#daily"], "Allowed"),  # no schedule: the store's marker is lower-case
    ("dynamodb:UpdateItem", ["acme/invoice-1"], "ImplicitlyDenied"),
    ("dynamodb:UpdateItem", [ACME_SCHEDULE], "ExplicitlyDenied"),
    ("dynamodb:DeleteItem", [ACME_SCHEDULE], "ExplicitlyDenied"),
    ("dynamodb:BatchWriteItem", ["acme/invoice-1", ACME_SCHEDULE], "ExplicitlyDenied"),
    ("dynamodb:GetItem", [ACME_SCHEDULE], "Allowed"),
    ("dynamodb:BatchGetItem", [ACME_SCHEDULE, "acme/invoice-1"], "Allowed"),
    ("dynamodb:BatchGetItem", [ACME_SCHEDULE, "globex/invoice-1"], "ImplicitlyDenied"),
    ("dynamodb:ConditionCheckItem", [ACME_SCHEDULE], "Allowed"),
]


@pytest.mark.parametrize(("action", "keys", "decision"), DIRECT_CLIENT_DECISIONS)
def test_the_direct_client_reads_its_schedules_but_never_writes_one(
    cfn_resources: dict[str, Any], action: str, keys: list[str], decision: str
) -> None:
    # Given the direct client role of tenant "acme"  When it calls action on the table naming keys  Then IAM
    # answers decision: its own tasks and occurrences it may put, a schedule's item (or another tenant's) never
    statements = role_statements(cfn_resources["TenantDirectClientRole"])
    context = {"dynamodb:LeadingKeys": keys}
    assert decide(statements, action, TABLE, context, {"TenantDirectRoleTenant": "acme"}) == decision


@pytest.mark.parametrize(
    "key",
    [
        "acme/#schedule#daily",
        "acme/x#schedule#y",
        "#schedule#daily",
        "acme/invoice-1",
        "acme/daily@20260101T000000.000Z",
        "acme/#schedule",
        "acme/schedule#x",
        "acme/##schedule##x",
        "acme/#Schedule#x",
    ],
)
def test_the_deny_matches_exactly_the_keys_the_store_takes_for_schedules(
    cfn_resources: dict[str, Any], key: str
) -> None:
    # Given a key  Then the Deny's pattern matches it exactly when the store reads it as a schedule's key
    (deny,) = [s for s in role_statements(cfn_resources["TenantDirectClientRole"]) if s["Effect"] == "Deny"]
    (pattern,) = deny["Condition"]["ForAnyValue:StringLike"]["dynamodb:LeadingKeys"]
    assert string_like(pattern, key) is (schedule_id_of_key(key) is not None)


@pytest.mark.parametrize(
    "name", ["acme", "a", "tenant-7", "x" * 40, "", "Acme", "-acme", "acme-", "a--b", "x" * 41, "ac/me", "ac*"]
)
def test_the_direct_role_tenant_parameter_takes_tenant_names_only(sam_template: dict[str, Any], name: str) -> None:
    # Given TenantDirectRoleTenant's pattern  Then it accepts exactly the tenant names of punctual.domain.tenancy (or
    # empty: no role), so its LeadingKeys prefix is the one the API writes
    pattern = sam_template["Parameters"]["TenantDirectRoleTenant"]["AllowedPattern"]
    assert bool(re.fullmatch(pattern, name)) is (name == "" or tenancy.is_tenant(name))


def test_the_executor_is_invoked_through_an_alias_that_can_be_provisioned(
    sam_template: dict[str, Any], cfn_resources: dict[str, Any]
) -> None:
    # Given the transformed template  Then the executor has the alias "live", provisioned only when asked
    alias = cfn_resources["ExecutorFunctionAliaslive"]
    assert alias["Type"] == "AWS::Lambda::Alias"
    assert alias["Properties"]["Name"] == "live"
    provisioned = alias["Properties"]["ProvisionedConcurrencyConfig"]
    assert provisioned["Fn::If"][0] == "HasProvisionedConcurrency"
    assert sam_template["Parameters"]["ExecutorProvisionedConcurrency"]["Default"] == 0
