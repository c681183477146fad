"""The Tasks table's capacity mode: on demand by default, with nothing to scale; PROVISIONED (``TableBillingMode``)
gives the table and every index a provisioned throughput and one auto scaling target and policy per read and write
capacity, each naming the table or an index it has. Conditions are resolved as CloudFormation would, with the
parameters given (others at their defaults)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from template_tools import evaluate_condition, resolve_value, sub_text

TARGET = "AWS::ApplicationAutoScaling::ScalableTarget"
POLICY = "AWS::ApplicationAutoScaling::ScalingPolicy"
DIRECTIONS = ("Read", "Write")
PROVISIONED = {
    "TableBillingMode": "PROVISIONED",
    "TableMinWriteCapacity": "10",
    "TableMaxWriteCapacity": "2000",
    "TableMinReadCapacity": "3",
    "TableMaxReadCapacity": "900",
    "TableTargetUtilization": "55",
}
DIMENSION = re.compile(r"dynamodb:(table|index):(Read|Write)CapacityUnits")
RESOURCE_ID = re.compile(r"^table/\$\{TasksTable\}(?:/index/(?P<index>[a-z_]+))?$")


def _of_type(resources: dict[str, Any], kind: str) -> dict[str, Any]:
    return {name: r for name, r in resources.items() if r["Type"] == kind}


def _table(cfn_template: dict[str, Any], parameters: dict[str, str]) -> dict[str, Any]:
    table: dict[str, Any] = resolve_value(
        cfn_template, cfn_template["Resources"]["TasksTable"]["Properties"], parameters
    )
    return table


def _deployed(cfn_template: dict[str, Any], kind: str, parameters: dict[str, str]) -> dict[str, Any]:
    """The resources of ``kind`` that CloudFormation creates with ``parameters``, their properties resolved."""
    return {
        name: resolve_value(cfn_template, r["Properties"], parameters)
        for name, r in _of_type(cfn_template["Resources"], kind).items()
        if "Condition" not in r or evaluate_condition(cfn_template, r["Condition"], parameters)
    }


def test_by_default_the_table_is_on_demand_with_nothing_to_scale(cfn_template: dict[str, Any]) -> None:
    # Given the parameters at their defaults
    assert cfn_template["Parameters"]["TableBillingMode"]["Default"] == "PAY_PER_REQUEST"
    table = _table(cfn_template, {})
    # Then the table is on demand, and neither it nor any index has a provisioned throughput
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert "ProvisionedThroughput" not in table
    assert [i["IndexName"] for i in table["GlobalSecondaryIndexes"] if "ProvisionedThroughput" in i] == []
    # ... and no scalable target or scaling policy is created
    assert _deployed(cfn_template, TARGET, {}) == {}
    assert _deployed(cfn_template, POLICY, {}) == {}


def test_every_scaling_resource_exists_only_when_provisioned(cfn_template: dict[str, Any]) -> None:
    # Given every auto scaling resource of the template  Then each is under IsProvisioned, which only PROVISIONED sets
    scaling = _of_type(cfn_template["Resources"], TARGET) | _of_type(cfn_template["Resources"], POLICY)
    assert scaling
    assert {name: r.get("Condition") for name, r in scaling.items()} == dict.fromkeys(scaling, "IsProvisioned")
    for mode in cfn_template["Parameters"]["TableBillingMode"]["AllowedValues"]:
        provisioned = evaluate_condition(cfn_template, "IsProvisioned", {"TableBillingMode": mode})
        assert provisioned is (mode == "PROVISIONED"), mode


def test_provisioned_gives_the_table_and_every_index_the_min_capacities(cfn_template: dict[str, Any]) -> None:
    # Given TableBillingMode = PROVISIONED
    table = _table(cfn_template, PROVISIONED)
    # Then the table and every index start at the min capacities
    minimum = {
        "ReadCapacityUnits": PROVISIONED["TableMinReadCapacity"],
        "WriteCapacityUnits": PROVISIONED["TableMinWriteCapacity"],
    }
    assert table["BillingMode"] == "PROVISIONED"
    assert table["ProvisionedThroughput"] == minimum
    for index in table["GlobalSecondaryIndexes"]:
        assert index.get("ProvisionedThroughput") == minimum, index["IndexName"]


def test_provisioned_scales_each_capacity_of_the_table_and_of_every_index(cfn_template: dict[str, Any]) -> None:
    # Given TableBillingMode = PROVISIONED, and the scalable targets CloudFormation then creates
    indexes = {i["IndexName"] for i in _table(cfn_template, PROVISIONED)["GlobalSecondaryIndexes"]}
    targets = _deployed(cfn_template, TARGET, PROVISIONED)
    scaled: dict[tuple[str | None, str], str] = {}
    for name, target in targets.items():
        match = RESOURCE_ID.match(sub_text(target["ResourceId"]))
        assert match, f"{name}: {target['ResourceId']}"
        index = match.group("index")
        # Then each names the table, or an index the table has, with the dimension of its kind ...
        assert index is None or index in indexes, f"{name}: no index {index}"
        dimension = DIMENSION.fullmatch(target["ScalableDimension"])
        assert dimension, f"{name}: {target['ScalableDimension']}"
        kind, direction = dimension.groups()
        assert kind == ("table" if index is None else "index"), name
        assert target["ServiceNamespace"] == "dynamodb"
        # ... between that direction's min and max, min <= max, with the service-linked role (no RoleARN)
        low, high = PROVISIONED[f"TableMin{direction}Capacity"], PROVISIONED[f"TableMax{direction}Capacity"]
        assert (target["MinCapacity"], target["MaxCapacity"]) == (low, high), name
        assert int(target["MinCapacity"]) <= int(target["MaxCapacity"]), name
        assert "RoleARN" not in target, name
        assert (index, direction) not in scaled, f"{name} and {scaled[(index, direction)]} scale the same capacity"
        scaled[(index, direction)] = name
    # ... and there is one for each of (the table, each index) x (read, write)
    assert set(scaled) == {(i, d) for i in (None, *sorted(indexes)) for d in DIRECTIONS}


def test_each_scalable_target_has_one_policy_that_tracks_the_target_utilization(cfn_template: dict[str, Any]) -> None:
    # Given TableBillingMode = PROVISIONED
    targets = _deployed(cfn_template, TARGET, PROVISIONED)
    policies = _deployed(cfn_template, POLICY, PROVISIONED)
    assert targets
    # Then each policy tracks its own target's utilization of that direction at TableTargetUtilization
    tracked: dict[str, str] = {}
    for name, policy in policies.items():
        target = policy["ScalingTargetId"]["Ref"]
        assert target in targets, f"{name}: {target}"
        assert target not in tracked, f"{name} and {tracked.get(target)} both scale {target}"
        tracked[target] = name
        direction = targets[target]["ScalableDimension"].rsplit(":", 1)[1].removesuffix("CapacityUnits")
        assert policy["PolicyType"] == "TargetTrackingScaling"
        configuration = policy["TargetTrackingScalingPolicyConfiguration"]
        assert configuration["TargetValue"] == PROVISIONED["TableTargetUtilization"], name
        assert configuration["PredefinedMetricSpecification"] == {
            "PredefinedMetricType": f"DynamoDB{direction}CapacityUtilization"
        }, name
    # ... and every target has one
    assert set(tracked) == set(targets)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_the_default_capacities_are_a_range(cfn_template: dict[str, Any], direction: str) -> None:
    # Given the min and max capacity parameters at their defaults  Then the min is at most the max (a scalable target
    # with min > max fails to register, and the stack update with it)
    parameters = cfn_template["Parameters"]
    assert (
        parameters[f"TableMin{direction}Capacity"]["Default"] <= parameters[f"TableMax{direction}Capacity"]["Default"]
    )
