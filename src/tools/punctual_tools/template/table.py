"""The Tasks table as template.yaml defines it (the one place it is written down), for DynamoDB Local and moto.

``create_table_kwargs`` turns the CloudFormation ``AWS::DynamoDB::Table`` properties into the arguments of
DynamoDB's ``CreateTable`` so that the local runtime and the tests build exactly the table AWS gets, with every
parameter at its default (an on-demand table: DynamoDB Local and moto need no capacity). Only they read the template,
from the source checkout they run in (the Lambda layer holds none). The adapter names the indexes itself
(:mod:`punctual.stores.dynamodb.table`); a test checks its names against the template.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from punctual_tools.template.intrinsics import resolve_value
from punctual_tools.template.load import load_template

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TableDescriptionTypeDef

TABLE_RESOURCE = "TasksTable"


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


def ensure_table(client: DynamoDBClient, table_name: str) -> bool:
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
    waiter = client.get_waiter("table_exists")
    # botocore sleeps a fraction of a second as well; the stubs ask for whole seconds
    waiter.wait(TableName=table_name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 300})  # type: ignore[typeddict-item]
    ttl = load_template()["Resources"][TABLE_RESOURCE]["Properties"].get("TimeToLiveSpecification")
    if ttl and ttl.get("Enabled"):
        client.update_time_to_live(
            TableName=table_name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl["AttributeName"]},
        )
    return True


def _add_missing_indexes(client: DynamoDBClient, table_name: str, table: TableDescriptionTypeDef) -> None:
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
    found = _find_key(load_template(template_path)["Resources"], "FilterCriteria")
    if len(found) != 1:
        raise ValueError(f"template.yaml should hold exactly one FilterCriteria (the fast path's), found {len(found)}")
    return [json.loads(f["Pattern"]) for f in found[0]["Filters"]]
