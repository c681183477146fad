"""A deployed stack as a verify run sees it: its outputs, its functions' configurations, its table's indexes.

The outputs give the client's settings (table, region, shards, lead, grace) and the functions' names; each
function's configuration its memory size and architecture, and the executor's its allowlist.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from punctual.config.settings import Settings
from punctual_tools.template import create_table_kwargs
from punctual_tools.verify.queue import VerifyError

if TYPE_CHECKING:
    from mypy_boto3_lambda import LambdaClient

# The functions a run's cost counts, by logical id, with the output that names each (the API is not used by a run).
FUNCTION_OUTPUTS = {
    "PollerFunction": "PollerFunctionName",
    "ExecutorFunction": "ExecutorFunctionName",
    "FastPathFunction": "FastPathFunctionName",
}
ALLOWLIST_VARIABLE = "PUNCTUAL_ALLOWED_TARGET_ARNS"
SETTINGS_OUTPUTS = ("TasksTableName", "Region", "ShardCount", "LeadMs", "PollIntervalMs", "MisfireGraceMs")


def stack_outputs(cloudformation: Any, stack_name: str) -> dict[str, str]:
    """The stack's outputs, by key (DescribeStacks)."""
    try:
        stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        raise VerifyError(f"cannot read the stack {stack_name!r} ({code}): is it deployed in this region?") from None
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    missing = [key for key in (*SETTINGS_OUTPUTS, *FUNCTION_OUTPUTS.values()) if key not in outputs]
    if missing:
        raise VerifyError(f"the stack {stack_name!r} has no output {', '.join(missing)}: deploy it from template.yaml")
    return outputs


def function_configs(lambda_client: LambdaClient, outputs: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Each counted function's configuration (GetFunctionConfiguration), by logical id."""
    return {
        logical: dict(lambda_client.get_function_configuration(FunctionName=outputs[output]))
        for logical, output in FUNCTION_OUTPUTS.items()
    }


def executor_allowlist(configs: Mapping[str, Mapping[str, Any]]) -> str:
    """The ARNs the executors may act on: their ``PUNCTUAL_ALLOWED_TARGET_ARNS`` (the template's ActionTargetArns)."""
    variables = configs["ExecutorFunction"].get("Environment", {}).get("Variables", {})
    return str(variables.get(ALLOWLIST_VARIABLE, ""))


def settings_of(outputs: Mapping[str, str], allowlist: str) -> Settings:
    """A client's settings for the stack: as its functions have them, with the executors' allowlist."""
    return Settings(
        table_name=outputs["TasksTableName"],
        region=outputs["Region"],
        shard_count=int(outputs["ShardCount"]),
        lead_ms=int(outputs["LeadMs"]),
        poll_interval_ms=int(outputs["PollIntervalMs"]),
        default_misfire_grace_ms=int(outputs["MisfireGraceMs"]),
        allowed_target_arns=allowlist,
    )


def table_indexes() -> list[str]:
    """The Tasks table's global secondary indexes, as template.yaml defines them."""
    return [index["IndexName"] for index in create_table_kwargs("Tasks").get("GlobalSecondaryIndexes", [])]
