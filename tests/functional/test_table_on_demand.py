"""The Tasks table moto builds from template.yaml is on demand, whatever capacity modes the template offers."""

from __future__ import annotations

from typing import Any

TABLE = "punctual-tasks-test"  # the functional conftest's table


def test_the_table_built_from_the_template_is_on_demand(dynamodb: Any) -> None:
    # Given the table the functional tier builds from template.yaml (ensure_table)
    table = dynamodb.describe_table(TableName=TABLE)["Table"]
    # Then it is on demand, and no index was given a provisioned throughput
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    for index in table["GlobalSecondaryIndexes"]:
        throughput = index.get("ProvisionedThroughput", {})
        assert (throughput.get("ReadCapacityUnits", 0), throughput.get("WriteCapacityUnits", 0)) == (0, 0), index
