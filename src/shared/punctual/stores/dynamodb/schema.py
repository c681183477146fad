"""The table definition, read from ``template.yaml`` (the one place it is written down).

``create_table_kwargs`` turns the CloudFormation ``AWS::DynamoDB::Table`` properties into the arguments of
DynamoDB's ``CreateTable`` so that the local runtime and the tests build exactly the table AWS gets, with every
parameter at its default (an on-demand table: DynamoDB Local and moto need no capacity). Only they read the template,
from the source checkout they run in (the Lambda layer holds none).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

TABLE_RESOURCE = "TasksTable"


class _CfnLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no type hints
    """A YAML loader that accepts CloudFormation's short-form intrinsic tags (``!Ref``, ``!Sub``, ...)."""


def _intrinsic(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = "Ref" if tag_suffix == "Ref" else f"Fn::{tag_suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


_CfnLoader.add_multi_constructor("!", _intrinsic)


def find_template() -> Path:
    """The ``template.yaml`` at the top of the source checkout."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "template.yaml"
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"no template.yaml above {Path(__file__).resolve()}: the table definition is read "
        "from a Punctual source checkout"
    )


@lru_cache(maxsize=4)
def load_template(path: str | None = None) -> dict[str, Any]:
    with open(path or find_template(), encoding="utf-8") as handle:
        template: dict[str, Any] = yaml.load(handle, Loader=_CfnLoader)  # noqa: S506 - SafeLoader subclass
    return template


# -- conditions ------------------------------------------------------------------------------------------
def evaluate_condition(template: Mapping[str, Any], name: str, parameters: Mapping[str, str]) -> bool:
    """Evaluate condition ``name`` with ``parameters`` (others at their defaults). Knows the functions the
    template uses: Fn::And, Fn::Or, Fn::Not, Fn::Equals, Fn::Join, Fn::FindInMap, Ref to a parameter,
    Condition."""
    params = template.get("Parameters", {})

    def value(node: Any) -> Any:
        if isinstance(node, dict) and len(node) == 1:
            ((fn, arg),) = node.items()
            if fn == "Ref":
                raw = parameters.get(arg, params[arg].get("Default", ""))
                return str(raw).split(",") if params[arg]["Type"] == "CommaDelimitedList" else str(raw)
            if fn == "Fn::Join":
                return arg[0].join(value(arg[1]))
            if fn == "Fn::Equals":
                return value(arg[0]) == value(arg[1])
            if fn == "Fn::Not":
                return not value(arg[0])
            if fn == "Fn::And":
                return all(value(a) for a in arg)
            if fn == "Fn::Or":
                return any(value(a) for a in arg)
            if fn == "Condition":
                return value(template["Conditions"][arg])
            if fn == "Fn::FindInMap":
                name, first, second = (value(a) for a in arg)
                return str(template["Mappings"][name][first][second])
            raise NotImplementedError(fn)
        if isinstance(node, list):
            return [value(n) for n in node]
        return str(node)

    return bool(value(template["Conditions"][name]))


NO_VALUE = None  # what resolve_value gives for AWS::NoValue: the property is not set


def resolve_value(template: Mapping[str, Any], node: Any, parameters: Mapping[str, str]) -> Any:
    """A property's value as CloudFormation resolves it with ``parameters`` (others at their defaults): a Ref to a
    parameter (its text), Fn::If on a condition (:func:`evaluate_condition`), AWS::NoValue (:data:`NO_VALUE`, and a
    key or list item that resolves to it is left out, as CloudFormation leaves the property unset); maps and lists
    resolved item by item, literals as they are."""
    if isinstance(node, dict) and len(node) == 1:
        ((fn, arg),) = node.items()
        if fn == "Ref" and arg == "AWS::NoValue":
            return NO_VALUE
        if fn == "Ref" and arg in template["Parameters"]:
            return str(parameters.get(arg, template["Parameters"][arg].get("Default", "")))
        if fn == "Fn::If":
            condition, when_true, when_false = arg
            chosen = when_true if evaluate_condition(template, condition, parameters) else when_false
            return resolve_value(template, chosen, parameters)
    if isinstance(node, dict):
        resolved = {key: resolve_value(template, value, parameters) for key, value in node.items()}
        return {key: value for key, value in resolved.items() if value is not NO_VALUE}
    if isinstance(node, list):
        return [item for item in (resolve_value(template, value, parameters) for value in node) if item is not NO_VALUE]
    return node


# -- the table -------------------------------------------------------------------------------------------------
def create_table_kwargs(table_name: str, template_path: str | None = None) -> dict[str, Any]:
    """``CreateTable`` arguments for the Tasks table as the template defines it, its conditions resolved with every
    parameter at its default: on demand (``TableBillingMode``), so no index or table gets ``ProvisionedThroughput``
    and no ``Fn::If`` reaches ``CreateTable``."""
    template = load_template(template_path)
    props = resolve_value(template, template["Resources"][TABLE_RESOURCE]["Properties"], {})
    kwargs: dict[str, Any] = {
        "TableName": table_name,
        "AttributeDefinitions": props["AttributeDefinitions"],
        "KeySchema": props["KeySchema"],
        "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
    }
    if props.get("GlobalSecondaryIndexes"):
        kwargs["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
    stream = props.get("StreamSpecification")
    if stream:
        kwargs["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": stream["StreamViewType"]}
    return kwargs


def ensure_table(client: Any, table_name: str) -> bool:
    """Create the table if it does not exist and wait until it is active. Returns True if created. A table made
    from an older template (a local stack's data kept on disk) gets the indexes it lacks."""
    try:
        existing = client.describe_table(TableName=table_name)["Table"]
    except client.exceptions.ResourceNotFoundException:
        existing = None
    if existing is not None:
        _add_missing_indexes(client, table_name, existing)
        return False
    try:
        client.create_table(**create_table_kwargs(table_name))
    except client.exceptions.ResourceInUseException:
        return False
    client.get_waiter("table_exists").wait(TableName=table_name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 300})
    ttl = load_template()["Resources"][TABLE_RESOURCE]["Properties"].get("TimeToLiveSpecification")
    if ttl and ttl.get("Enabled"):
        client.update_time_to_live(
            TableName=table_name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl["AttributeName"]},
        )
    return True


def _add_missing_indexes(client: Any, table_name: str, table: dict[str, Any]) -> None:
    """Create, one at a time, each index of the template that ``table`` lacks (CloudFormation does this in AWS)."""
    have = {index["IndexName"] for index in table.get("GlobalSecondaryIndexes", [])}
    wanted = create_table_kwargs(table_name)
    for index in wanted.get("GlobalSecondaryIndexes", []):
        if index["IndexName"] in have:
            continue
        names = {key["AttributeName"] for key in index["KeySchema"]}
        client.update_table(
            TableName=table_name,
            AttributeDefinitions=[a for a in wanted["AttributeDefinitions"] if a["AttributeName"] in names],
            GlobalSecondaryIndexUpdates=[{"Create": index}],
        )
        for _ in range(300):
            indexes = client.describe_table(TableName=table_name)["Table"].get("GlobalSecondaryIndexes", [])
            if all(i.get("IndexStatus", "ACTIVE") == "ACTIVE" for i in indexes):
                break
            time.sleep(0.2)


def _find_key(node: Any, key: str) -> list[Any]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == key] + [f for v in node.values() for f in _find_key(v, key)]
    if isinstance(node, list):
        return [f for v in node for f in _find_key(v, key)]
    return []


def stream_filter_patterns(template_path: str | None = None) -> list[dict[str, Any]]:
    """The fast path's stream filter patterns, as the template gives them to the event source mapping
    (the local stream reader applies the same ones)."""
    import json

    found = _find_key(load_template(template_path)["Resources"], "FilterCriteria")
    if len(found) != 1:
        raise ValueError(f"template.yaml should hold exactly one FilterCriteria (the fast path's), found {len(found)}")
    return [json.loads(f["Pattern"]) for f in found[0]["Filters"]]
