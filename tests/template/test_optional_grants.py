"""Grants that exist only when a parameter asks for them: KMS keys (of encrypted targets, of the table) and the tenant
map's SSM parameter. Each is a policy of its own in the role, under a condition, so that with the defaults nothing
is granted (test_iam_grants.py checks, with the defaults, that every grant is used); with the parameter set, the
role may use exactly what it names. Roles are resolved as CloudFormation would for a deployment
(``punctual_tools.iam.role_policies``).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from template_tools import resolve_value

from punctual.config.settings import Settings
from punctual_tools.iam import Stack, role_policies
from punctual_tools.iam.policies import role_policies_of

FUNCTIONS = ("PollerFunction", "ExecutorFunction", "FastPathFunction", "ApiFunction")
ACCOUNT, REGION = "123456789012", "us-east-1"
TABLE_KEY = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
TARGET_KEYS = [f"arn:aws:kms:{REGION}:{ACCOUNT}:key/aaaa", f"arn:aws:kms:{REGION}:{ACCOUNT}:key/bbbb"]
TENANT_MAP = "/punctual/punctual/tenant-map"
TENANT_MAP_ARN = f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/punctual/punctual/tenant-map"
OPTIONAL_ACTIONS = {"kms:Decrypt", "kms:GenerateDataKey"}


def _grants(cfn_template: dict[str, Any], function: str, parameters: dict[str, str]) -> set[tuple[str, str]]:
    """``(action, resource)`` pairs the function's role allows, resolved for a deployment with ``parameters``."""
    role = role_policies(cfn_template, function, Stack(account=ACCOUNT, region=REGION, parameters=parameters))
    return _pairs(role.statements)


def _pairs(statements: list[dict[str, Any]]) -> set[tuple[str, str]]:
    found = set()
    for statement in statements:
        if statement["Effect"] != "Allow":
            continue
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        found |= {(a, r) for a in actions for r in resources}
    return found


@pytest.mark.parametrize("function", FUNCTIONS)
def test_with_the_defaults_no_key_and_no_tenant_map_parameter_is_granted(
    cfn_template: dict[str, Any], function: str
) -> None:
    granted = _grants(cfn_template, function, {})
    assert not {a for a, _ in granted} & OPTIONAL_ACTIONS
    assert not [r for a, r in granted if a == "ssm:GetParameter" and "tenant-map" in r]


@pytest.mark.parametrize("function", FUNCTIONS)
def test_a_table_key_is_granted_to_every_role_that_uses_the_table(cfn_template: dict[str, Any], function: str) -> None:
    # Given TableKmsKeyArn  Then each function's role may decrypt with that key, and no other
    granted = _grants(cfn_template, function, {"TableKmsKeyArn": TABLE_KEY})
    assert {(a, r) for a, r in granted if a.startswith("kms:")} == {("kms:Decrypt", TABLE_KEY)}


def test_a_table_key_is_granted_to_the_direct_client_role(cfn_template: dict[str, Any]) -> None:
    stack = Stack(
        account=ACCOUNT, region=REGION, parameters={"TableKmsKeyArn": TABLE_KEY, "TenantDirectRoleTenant": "acme"}
    )
    granted = _pairs(role_policies_of(cfn_template, "TenantDirectClientRole", stack).statements)
    assert {(a, r) for a, r in granted if a.startswith("kms:")} == {("kms:Decrypt", TABLE_KEY)}


@pytest.mark.parametrize(("key", "encrypted"), [("", False), (TABLE_KEY, True)])
def test_the_table_is_encrypted_with_the_key_only_when_named(
    cfn_template: dict[str, Any], key: str, encrypted: bool
) -> None:
    # Given TableKmsKeyArn = key  Then the table names it as its KMS key, or leaves DynamoDB's AWS owned key
    sse = resolve_value(
        cfn_template, cfn_template["Resources"]["TasksTable"]["Properties"]["SSESpecification"], {"TableKmsKeyArn": key}
    )
    expected = {"SSEEnabled": True, "SSEType": "KMS", "KMSMasterKeyId": key} if encrypted else None
    assert sse == expected


def test_target_keys_are_granted_to_the_executor_only(cfn_template: dict[str, Any]) -> None:
    # Given ActionTargetKmsKeyArns  Then the executor may generate data keys and decrypt with exactly those (what
    # sending to an SQS queue or SNS topic under such a key needs); no other role gets them
    parameters = {"ActionTargetKmsKeyArns": ",".join(TARGET_KEYS)}
    granted = _grants(cfn_template, "ExecutorFunction", parameters)
    assert {(a, r) for a, r in granted if a.startswith("kms:")} == {
        (a, k) for a in ("kms:GenerateDataKey", "kms:Decrypt") for k in TARGET_KEYS
    }
    for function in ("PollerFunction", "FastPathFunction", "ApiFunction"):
        assert not {a for a, _ in _grants(cfn_template, function, parameters)} & OPTIONAL_ACTIONS, function


@pytest.mark.parametrize(
    ("function", "granted"),
    [("ApiFunction", True), ("ExecutorFunction", True), ("PollerFunction", True), ("FastPathFunction", False)],
)
def test_the_tenant_map_parameter_is_readable_by_the_api_the_executor_and_the_poller_exactly(
    cfn_template: dict[str, Any], function: str, granted: bool
) -> None:
    # Given TenantMapParameter  Then the API function, the executor and the poller (a schedule's tenant's quotas)
    # may read that parameter, by its exact ARN (parameter + its name, which starts with "/"); the fast path, which
    # never reads the map, not
    reads = {
        r for a, r in _grants(cfn_template, function, {"TenantMapParameter": TENANT_MAP}) if a == "ssm:GetParameter"
    }
    assert (TENANT_MAP_ARN in reads) is granted
    assert not {r for r in reads if "tenant-map" in r} - {TENANT_MAP_ARN}


@pytest.mark.parametrize(
    ("name", "accepted"),
    [
        ("", True),
        (TENANT_MAP, True),
        ("/tenant-map", True),
        ("punctual/tenant-map", False),
        ("/a//b", False),
        ("/a b", False),
    ],
)
def test_the_tenant_map_parameter_is_a_name_starting_with_a_slash(
    sam_template: dict[str, Any], name: str, accepted: bool
) -> None:
    # Given TenantMapParameter's pattern  Then it takes a hierarchical Parameter Store name (the ARN is
    # "parameter" + the name, so the name must start with "/") or nothing
    assert bool(re.fullmatch(sam_template["Parameters"]["TenantMapParameter"]["AllowedPattern"], name)) is accepted


TENANT_PATH = "/punctual/punctual/tenants"


@pytest.mark.parametrize(
    ("function", "granted"),
    [("ApiFunction", True), ("ExecutorFunction", True), ("PollerFunction", True), ("FastPathFunction", False)],
)
def test_the_tenant_map_path_is_readable_by_the_api_the_executor_and_the_poller_exactly(
    cfn_template: dict[str, Any], function: str, granted: bool
) -> None:
    # Given TenantMapPath  Then the API function, the executor and the poller may read the parameters under that path
    # (GetParametersByPath on the path's ARN, what the tenant map's reader calls), nothing else of SSM for it
    grants = _grants(cfn_template, function, {"TenantMapPath": TENANT_PATH})
    by_path = {r for a, r in grants if a == "ssm:GetParametersByPath"}
    assert by_path == ({f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter{TENANT_PATH}"} if granted else set())
    assert not {r for a, r in grants if a == "ssm:GetParameter" and "tenants" in r}


def test_the_functions_get_the_path_with_its_trailing_slash_and_only_one_form_is_allowed(
    sam_template: dict[str, Any],
) -> None:
    # Given the tenant map's location  Then a path reaches the functions as "<path>/" (the setting's path form), and
    # the template's rule refuses a deployment that names both a parameter and a path

    assert Settings(tenant_map_parameter=TENANT_PATH + "/").tenant_map_parameter == TENANT_PATH + "/"
    env = sam_template["Resources"]["ExecutorFunction"]["Properties"]["Environment"]["Variables"]
    assert env["PUNCTUAL_TENANT_MAP_PARAMETER"]["Fn::If"][1] == {"Fn::Sub": "${TenantMapPath}/"}
    (assertion,) = sam_template["Rules"]["OneTenantMapLocation"]["Assertions"]
    assert assertion["Assert"] == {
        "Fn::Or": [
            {"Fn::Equals": [{"Ref": "TenantMapParameter"}, ""]},
            {"Fn::Equals": [{"Ref": "TenantMapPath"}, ""]},
        ]
    }
