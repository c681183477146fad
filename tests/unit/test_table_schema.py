"""The local table's definition, read from template.yaml: its conditions resolved with every parameter at its default,
so that DynamoDB Local and moto get plain ``CreateTable`` arguments (an on-demand table), never an intrinsic."""

from __future__ import annotations

from typing import Any

from punctual.stores.dynamodb.table import DUE_INDEX, SCHEDULE_INDEX, TENANT_ACTIVE_INDEX, TENANT_INDEX
from punctual_tools.template import TABLE_RESOURCE, create_table_kwargs, load_template, resolve_value


def _intrinsics(node: Any, path: str = "") -> list[str]:
    """Where ``node`` still holds a CloudFormation intrinsic (``Ref``, ``Fn::...``, ``Condition``)."""
    if isinstance(node, dict):
        found = [f"{path}.{key}" for key in node if key in ("Ref", "Condition") or key.startswith("Fn::")]
        return found + [f for key, value in node.items() for f in _intrinsics(value, f"{path}.{key}")]
    if isinstance(node, list):
        return [f for i, value in enumerate(node) for f in _intrinsics(value, f"{path}[{i}]")]
    return []


def test_the_local_table_is_on_demand_and_holds_no_intrinsic() -> None:
    # Given the table in template.yaml, whose capacity mode and throughputs depend on TableBillingMode
    template = load_template()["Resources"][TABLE_RESOURCE]["Properties"]
    assert _intrinsics(template["BillingMode"])
    assert _intrinsics(template["GlobalSecondaryIndexes"])
    # When the local runtime and the tests turn it into CreateTable's arguments
    kwargs = create_table_kwargs("punctual-tasks")
    # Then every intrinsic is resolved at the parameters' defaults: on demand, no throughput on the table or an index
    assert _intrinsics(kwargs) == []
    assert kwargs["BillingMode"] == "PAY_PER_REQUEST"
    assert "ProvisionedThroughput" not in kwargs
    indexes = kwargs["GlobalSecondaryIndexes"]
    assert [i["IndexName"] for i in indexes] == [i["IndexName"] for i in template["GlobalSecondaryIndexes"]]
    assert [sorted(i) for i in indexes] == [["IndexName", "KeySchema", "Projection"]] * len(indexes)


def test_a_property_set_to_no_value_is_left_out() -> None:
    # Given a property whose branch is AWS::NoValue, in a map and in a list  Then CloudFormation leaves it unset
    template = {
        "Parameters": {"Mode": {"Type": "String", "Default": "a"}},
        "Conditions": {"IsB": {"Fn::Equals": [{"Ref": "Mode"}, "b"]}},
    }
    chosen = {"Fn::If": ["IsB", {"Units": 5}, {"Ref": "AWS::NoValue"}]}
    node = {"Name": "t", "Throughput": chosen, "Items": [chosen, "kept"]}
    assert resolve_value(template, node, {}) == {"Name": "t", "Items": ["kept"]}
    assert resolve_value(template, node, {"Mode": "b"}) == {
        "Name": "t",
        "Throughput": {"Units": 5},
        "Items": [{"Units": 5}, "kept"],
    }


def test_the_adapter_names_indexes_the_template_defines() -> None:
    # Given the index names the DynamoDB adapter queries (its own constants: the runtime never reads the template)
    adapter = {DUE_INDEX, SCHEDULE_INDEX, TENANT_INDEX, TENANT_ACTIVE_INDEX}
    # Then each is an index of the table in template.yaml, with a key schema
    indexes = {i["IndexName"]: i for i in create_table_kwargs("punctual-tasks")["GlobalSecondaryIndexes"]}
    assert adapter <= set(indexes), sorted(adapter - set(indexes))
    assert all(indexes[name]["KeySchema"] for name in adapter)
