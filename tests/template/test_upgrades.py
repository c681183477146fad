"""An upgrade reaches every function: what CloudFormation gets from two builds of template.yaml.

The executor is invoked through its alias "live", which points at a published version; a version is a snapshot of
the function's code, layers and configuration. ``sam package`` leaves each code directory as an S3 location whose
key changes with the content, so translating the template twice, with one location changed the way a new build
changes it, shows what an upgrade does: which resources get new logical ids (CloudFormation creates a new layer
version or publishes a new function version for each), and where the alias points. A version's logical id is all
that tells CloudFormation to publish one (SAM computes it; an unchanged id leaves the alias on the old version).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from cfnlint.api import lint
from cfnlint.schema import PROVIDER_SCHEMA_MANAGER
from template_tools import (
    ARTIFACT_BUCKET,
    evaluate_condition,
    grants,
    role_statements,
    sub_text,
    substitute_parameters,
    transform_template,
)
from test_lint import LINT_CONFIG

FUNCTIONS = ("PollerFunction", "ExecutorFunction", "FastPathFunction", "ApiFunction")
LAMBDA_VERSION_DESCRIPTION_MAX = 256  # characters (AWS::Lambda::Version Description, Lambda's PublishVersion)


def _build(sam_template: dict[str, Any], build: str, changed: str | None = None) -> dict[str, Any]:
    """``sam_template`` as ``sam package`` would leave build ``build``: every code directory an S3 location under
    ``build/``, except ``changed`` (a function or the layer), whose content is new: its key is under ``next/``."""
    sam = copy.deepcopy(sam_template)
    for name, resource in sam["Resources"].items():
        key = {"AWS::Serverless::Function": "CodeUri", "AWS::Serverless::LayerVersion": "ContentUri"}.get(
            resource["Type"]
        )
        if key:
            prefix = "next" if name == changed else build
            resource["Properties"][key] = f"s3://{ARTIFACT_BUCKET}/{prefix}/{resource['Properties'][key]}"
    return sam


def _of_type(cfn: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in cfn["Resources"].items() if r["Type"] == kind}


def _layer(cfn: dict[str, Any]) -> str:
    (name,) = _of_type(cfn, "AWS::Lambda::LayerVersion")
    return name


def _aliases(cfn: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each function invoked through an alias: its alias's properties, by function."""
    return {
        a["Properties"]["FunctionName"]["Ref"]: a["Properties"] for a in _of_type(cfn, "AWS::Lambda::Alias").values()
    }


def _version(cfn: dict[str, Any], function: str) -> str:
    """The logical id of the version ``function``'s alias points at (its only version resource)."""
    (name,) = [
        name
        for name, v in _of_type(cfn, "AWS::Lambda::Version").items()
        if v["Properties"]["FunctionName"] == {"Ref": function}
    ]
    assert _aliases(cfn)[function]["FunctionVersion"] == {"Fn::GetAtt": [name, "Version"]}
    return name


@pytest.fixture(scope="module")
def before(sam_template: dict[str, Any]) -> dict[str, Any]:
    return transform_template(_build(sam_template, "build-1"))


def test_only_the_executor_is_invoked_through_an_alias(before: dict[str, Any]) -> None:
    # Given the transformed template  Then the executor has the one alias (the poller, the fast path and the API
    # function are invoked unqualified: their $LATEST, which an update changes in place)
    assert set(_aliases(before)) == {"ExecutorFunction"}


def test_a_new_layer_reaches_every_function_and_a_new_executor_version(
    sam_template: dict[str, Any], before: dict[str, Any]
) -> None:
    # Given two builds that differ only in the shared layer's content (where almost all code lives)
    after = transform_template(_build(sam_template, "build-1", changed="SharedLayer"))
    # Then CloudFormation publishes a new layer version, and every function names that one
    assert _layer(after) != _layer(before)
    for function in FUNCTIONS:
        assert after["Resources"][function]["Properties"]["Layers"] == [{"Ref": _layer(after)}], function
    # ... and every function invoked through an alias gets a new version (on the new layer), its alias moved to it
    for function in _aliases(after):
        assert _version(after, function) != _version(before, function), function


@pytest.mark.parametrize("changed", FUNCTIONS)
def test_a_new_handler_reaches_its_function(sam_template: dict[str, Any], before: dict[str, Any], changed: str) -> None:
    # Given two builds that differ only in one function's code directory
    after = transform_template(_build(sam_template, "build-1", changed=changed))
    # Then that function's code is the new one, every function keeps the same layer version
    assert after["Resources"][changed]["Properties"]["Code"] != before["Resources"][changed]["Properties"]["Code"]
    assert _layer(after) == _layer(before)
    # ... and a function invoked through an alias gets a new version when its own code changed, only then
    for function in _aliases(after):
        assert (_version(after, function) != _version(before, function)) is (function == changed), function


# -- settings: a change of parameter values ------------------------------------------------------------------
# The parameters the executor's configuration holds that ExecutorConfigRevision stands for in its version's
# description: lists too long for a description of 256 characters.
REVISION_COVERS = {"TenantMap", "AllowedTargets", "ActionTargetArns"}


def _executor_parameters(sam_template: dict[str, Any]) -> set[str]:
    """Every parameter the executor's version holds: those its environment (Globals' and its own) and its memory
    size refer to, through a Ref, an If or a Join."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if set(node) == {"Ref"} and node["Ref"] in sam_template["Parameters"]:
                found.add(node["Ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    props = sam_template["Resources"]["ExecutorFunction"]["Properties"]
    walk(sam_template["Globals"]["Function"]["Environment"])
    walk(props["Environment"])
    walk(props["MemorySize"])
    return found


def test_every_executor_setting_is_in_its_version_description(sam_template: dict[str, Any]) -> None:
    # Given the executor's version description (SAM hashes no parameter value into the version's logical id)
    description = sub_text(sam_template["Resources"]["ExecutorFunction"]["Properties"]["VersionDescription"])
    parameters = _executor_parameters(sam_template)
    assert {"LeadMs", "ExecutorMemorySize", "TenantMapParameter"} <= parameters
    # Then each parameter of the executor's configuration is in it, but the lists the revision label stands for
    for name in parameters - REVISION_COVERS:
        assert f"${{{name}}}" in description, name
    assert "${ExecutorConfigRevision}" in description
    assert parameters >= REVISION_COVERS


def test_a_changed_description_makes_cloudformation_publish_a_new_version() -> None:
    # Given AWS::Lambda::Version's resource schema (cfn-lint's copy of CloudFormation's registry)  Then its
    # Description is create-only: a new value replaces the version, i.e. publishes a new one from the function
    # as updated, and the alias (FunctionVersion: its Version attribute) moves to it

    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", "AWS::Lambda::Version").schema
    assert "/properties/Description" in schema["createOnlyProperties"]


@pytest.mark.parametrize(
    ("parameter", "value"),
    [
        ("LeadMs", "60000"),
        ("ExecutorMemorySize", "512"),
        ("TenantMapParameter", "/punctual/p/map"),
        ("LogLevel", "DEBUG"),
    ],
)
def test_a_new_setting_gives_the_executor_version_a_new_description(
    sam_template: dict[str, Any], before: dict[str, Any], parameter: str, value: str
) -> None:
    # Given the transformed template, its parameters at their defaults and then one of them changed
    (version,) = _of_type(before, "AWS::Lambda::Version").values()
    text = sub_text(version["Properties"]["Description"])
    defaults = {name: str(p.get("Default", "")) for name, p in sam_template["Parameters"].items()}
    # Then the version's description, as CloudFormation resolves it, differs
    assert substitute_parameters(text, defaults) != substitute_parameters(text, {**defaults, parameter: value})


def test_the_longest_version_description_fits(sam_template: dict[str, Any]) -> None:
    # Given every parameter of the description at its longest  Then it fits Lambda's 256 characters
    parameters = sam_template["Parameters"]
    text = " ".join(sub_text(sam_template["Resources"]["ExecutorFunction"]["Properties"]["VersionDescription"]).split())

    def longest(name: str) -> str:
        p = parameters[name]
        if "AllowedValues" in p:
            return max((str(v) for v in p["AllowedValues"]), key=len)
        if "MaxLength" in p:
            return "x" * int(p["MaxLength"])
        if "MaxValue" in p:
            return str(p["MaxValue"])
        pattern = p["AllowedPattern"]  # ^[...]{1,N}$
        return "x" * int(pattern.rsplit(",", 1)[1].split("}")[0])

    names = {n for n in parameters if f"${{{n}}}" in text}
    assert len(substitute_parameters(text, {n: longest(n) for n in names})) <= LAMBDA_VERSION_DESCRIPTION_MAX


# -- gradual deployment of the executor ------------------------------------------------------------------------
GRADUAL = ("Canary10Percent5Minutes", "Linear10PercentEvery1Minute")
ROLLBACK_ALARMS = [{"Name": {"Ref": "ExecutorErrorsAlarm"}}, {"Name": {"Ref": "FireDriftAlarm"}}]


def test_by_default_cloudformation_moves_the_alias_at_once(
    sam_template: dict[str, Any], before: dict[str, Any]
) -> None:
    # Given the default ExecutorDeployment  Then no CodeDeploy resource exists and the alias has no update policy
    assert sam_template["Parameters"]["ExecutorDeployment"]["Default"] == "AllAtOnce"
    assert not [r for r in before["Resources"].values() if r["Type"].startswith("AWS::CodeDeploy::")]
    (alias,) = _of_type(before, "AWS::Lambda::Alias").values()
    assert "UpdatePolicy" not in alias
    assert not evaluate_condition(sam_template, "HasGradualExecutorDeployment", {})


@pytest.fixture(scope="module", params=GRADUAL)
def gradual(request: pytest.FixtureRequest, sam_template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    deployment = str(request.param)
    return deployment, transform_template(_build(sam_template, "build-1"), {"ExecutorDeployment": deployment})


def test_a_gradual_deployment_shifts_the_alias_and_rolls_back_on_the_alarms(
    sam_template: dict[str, Any], gradual: tuple[str, dict[str, Any]]
) -> None:
    deployment, cfn = gradual
    # Given ExecutorDeployment = a gradual schedule  Then CodeDeploy shifts the alias by that schedule
    assert evaluate_condition(sam_template, "HasGradualExecutorDeployment", {"ExecutorDeployment": deployment})
    (alias,) = _of_type(cfn, "AWS::Lambda::Alias").values()
    (group_name, group) = next(iter(_of_type(cfn, "AWS::CodeDeploy::DeploymentGroup").items()))
    assert alias["UpdatePolicy"]["CodeDeployLambdaAliasUpdate"]["DeploymentGroupName"] == {"Ref": group_name}
    props = group["Properties"]
    assert props["DeploymentConfigName"] == {
        "Fn::Sub": ["CodeDeployDefault.Lambda${ConfigName}", {"ConfigName": deployment}]
    }
    # ... and shifts back when the executor fails or fires late (the alarms), with CodeDeploy's role written here
    assert props["AlarmConfiguration"] == {"Enabled": True, "Alarms": ROLLBACK_ALARMS}
    assert "DEPLOYMENT_STOP_ON_ALARM" in props["AutoRollbackConfiguration"]["Events"]
    assert props["ServiceRoleArn"] == {
        "Fn::If": [
            "HasGradualExecutorDeployment",
            {"Fn::GetAtt": ["ExecutorDeploymentRole", "Arn"]},
            {"Ref": "AWS::NoValue"},
        ]
    }
    roles = _of_type(cfn, "AWS::IAM::Role")
    assert roles["ExecutorDeploymentRole"]["Condition"] == "HasGradualExecutorDeployment"
    assert all("ManagedPolicyArns" not in r["Properties"] for r in roles.values())


def test_the_deployment_role_may_shift_only_the_executor_alias(gradual: tuple[str, dict[str, Any]]) -> None:
    # Given CodeDeploy's role  Then it is CodeDeploy's, and may read and move the executor's alias and read the two
    # alarms of the deployment, nothing else
    _, cfn = gradual
    role = cfn["Resources"]["ExecutorDeploymentRole"]
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "codedeploy.amazonaws.com"}
    assert grants(role_statements(role)) == {
        ("lambda:GetAlias", "ExecutorFunction.Arn"),
        ("lambda:UpdateAlias", "ExecutorFunction.Arn"),
        ("lambda:GetProvisionedConcurrencyConfig", "${ExecutorFunction.Arn}:live"),
        ("cloudwatch:DescribeAlarms", "ExecutorErrorsAlarm.Arn"),
        ("cloudwatch:DescribeAlarms", "FireDriftAlarm.Arn"),
    }


def test_the_gradual_deployment_template_is_lint_clean(gradual: tuple[str, dict[str, Any]]) -> None:
    # Given the template SAM makes for a gradual deployment  When cfn-lint reads it  Then it finds nothing but that
    # the deployment group's ServiceRoleArn may be missing: it is !If [HasGradualExecutorDeployment, the role,
    # nothing], and SAM makes the group only when that condition holds (the same map entry), which cfn-lint
    # cannot know; as written, the function names the role only under the condition the role exists under
    _, cfn = gradual
    matches = [
        m
        for m in lint(json.dumps(cfn, indent=1), config=LINT_CONFIG)
        if not (m.rule.id == "E3003" and "'ServiceRoleArn' is a required property" in m.message)
    ]
    assert not matches, "\n".join(f"{m.rule.id} line {m.linenumber}: {m.message}" for m in matches)


def test_every_deployment_value_is_in_the_map(sam_template: dict[str, Any]) -> None:
    # Given ExecutorDeployment's allowed values  Then each has its entry (SAM and the condition read the same one),
    # and only AllAtOnce is not gradual
    mapping = sam_template["Mappings"]["ExecutorDeployments"]
    allowed = sam_template["Parameters"]["ExecutorDeployment"]["AllowedValues"]
    assert set(mapping) == set(allowed)
    for value in allowed:
        gradual = evaluate_condition(sam_template, "HasGradualExecutorDeployment", {"ExecutorDeployment": value})
        assert gradual is (value != "AllAtOnce"), value


# -- the table: one index created or deleted an update ---------------------------------------------------------------
# The Tasks table's indexes as the last release deployed them. DynamoDB creates or deletes one global secondary index
# per UpdateTable, and CloudFormation fails a stack update that asks for more (or changes an index's keys in place):
# a change of indexes is spread over releases, and this file moves to the template's indexes when a release ships.
RELEASED_INDEXES = Path(__file__).parent / "fixtures" / "released_indexes.json"


def _indexes(sam_template: dict[str, Any]) -> dict[str, Any]:
    table = sam_template["Resources"]["TasksTable"]["Properties"]
    return {
        index["IndexName"]: {"KeySchema": index["KeySchema"], "Projection": index["Projection"]}
        for index in table["GlobalSecondaryIndexes"]
    }


def test_an_upgrade_from_the_last_release_creates_or_deletes_one_index_at_most(sam_template: dict[str, Any]) -> None:
    # Given the indexes of the last release's table and those of template.yaml
    released = json.loads(RELEASED_INDEXES.read_text(encoding="utf-8"))
    current = _indexes(sam_template)
    # Then one update of the stack gets from one to the other: at most one index created or deleted, and every
    # index both have is the same (keys and projection cannot change in place)
    created, deleted = set(current) - set(released), set(released) - set(current)
    assert len(created) + len(deleted) <= 1, (sorted(created), sorted(deleted))
    for name in set(current) & set(released):
        assert current[name] == released[name], name
    # ... and every attribute an index keys on is defined, none that no key uses (CloudFormation refuses both)
    table = sam_template["Resources"]["TasksTable"]["Properties"]
    keyed = {k["AttributeName"] for k in table["KeySchema"]} | {
        k["AttributeName"] for index in current.values() for k in index["KeySchema"]
    }
    assert {a["AttributeName"] for a in table["AttributeDefinitions"]} == keyed
