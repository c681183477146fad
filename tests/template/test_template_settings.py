"""The functions' environment in template.yaml against what the code reads: ``Settings`` fields (never the local
runtime's own ``LocalSettings`` ones), and Powertools' service and namespace."""

from __future__ import annotations

import json
from typing import Any

import pytest
from template_tools import SUB_VARIABLE, sub_text

from punctual.config.settings import ENV_PREFIX, Settings
from punctual.config.tenant_map import TenantMap
from punctual.domain.events import BatchEvent, BatchTask
from punctual.domain.keys import MAX_MS
from punctual.domain.model import MISFIRE_POLICIES, is_valid_task_id
from punctual.polling.tick import sub_polls
from punctual.runtime import metrics
from punctual_tools.settings import LocalSettings

FUNCTIONS = ("PollerFunction", "ExecutorFunction", "FastPathFunction", "ApiFunction")


def _environment(sam_template: dict[str, Any], function: str) -> dict[str, Any]:
    """A function's variables as SAM merges them: Globals first, the function's own on top."""
    merged = dict(sam_template["Globals"]["Function"]["Environment"]["Variables"])
    own = sam_template["Resources"][function]["Properties"].get("Environment", {}).get("Variables", {})
    return {**merged, **own}


def _all_variables(sam_template: dict[str, Any]) -> set[str]:
    return {name for function in FUNCTIONS for name in _environment(sam_template, function)}


def _not_read_yet() -> set[str]:
    """PUNCTUAL_TENANT_MAP_PARAMETER while :class:`Settings` has no ``tenant_map_parameter`` (the parameter the tenant
    map is read from): the template passes it ahead of the code, and this check holds it to the field once there."""
    return set() if "tenant_map_parameter" in Settings.model_fields else {"PUNCTUAL_TENANT_MAP_PARAMETER"}


def test_every_punctual_variable_names_a_settings_field(sam_template: dict[str, Any]) -> None:
    # Given every PUNCTUAL_* variable the template sets  Then each is PUNCTUAL_<a Settings field>
    # (Settings.from_env reads only its fields' names: a misspelt variable would be silently ignored, and so
    # would a local-only one, which only the local runtime's LocalSettings has)
    names = {n for n in _all_variables(sam_template) if n.startswith(ENV_PREFIX)}
    assert names, "the template sets no PUNCTUAL_* variable"
    unknown = {n for n in names if n[len(ENV_PREFIX) :].lower() not in Settings.model_fields} - _not_read_yet()
    assert not unknown, f"not Settings fields: {sorted(unknown)}"
    local_only = set(LocalSettings.model_fields) - set(Settings.model_fields)
    assert local_only
    assert not {n[len(ENV_PREFIX) :].lower() for n in names} & local_only


def test_the_functions_get_what_they_need(sam_template: dict[str, Any]) -> None:
    # Given each function's merged environment  Then the table and its layout reach all of them, the
    # executor's name reaches those that invoke it and the dead-letter queue the executor
    for function in FUNCTIONS:
        env = _environment(sam_template, function)
        assert env["PUNCTUAL_TABLE_NAME"] == {"Ref": "TasksTable"}
        for name, parameter in [
            ("PUNCTUAL_SHARD_COUNT", "ShardCount"),
            ("PUNCTUAL_LEAD_MS", "LeadMs"),
            ("PUNCTUAL_DEFAULT_MISFIRE_GRACE_MS", "MisfireGraceMs"),
            ("PUNCTUAL_RETENTION_DAYS", "RetentionDays"),
            ("POWERTOOLS_LOG_LEVEL", "LogLevel"),
        ]:
            assert env[name] == {"Ref": parameter}, (function, name)
    for function in ("PollerFunction", "FastPathFunction"):
        assert _environment(sam_template, function)["PUNCTUAL_EXECUTOR_FUNCTION"] == {"Ref": "ExecutorFunction.Alias"}
    executor = _environment(sam_template, "ExecutorFunction")
    assert executor["PUNCTUAL_DEAD_LETTER_QUEUE_URL"] == {"Ref": "TaskDeadLetterQueue"}
    # (an SQS queue's Ref is its https:// URL, which is what Settings.dead_letter_queue_url accepts)
    assert sam_template["Resources"]["TaskDeadLetterQueue"]["Type"] == "AWS::SQS::Queue"
    assert "PUNCTUAL_EXECUTOR_FUNCTION" not in executor


def test_the_api_function_gets_the_tenant_map_and_the_client_checks(sam_template: dict[str, Any]) -> None:
    # Given the API function's merged environment  Then its tenants come from the TenantMap parameter, and it
    # checks targets against the same lists as the executor (which checks them again when it fires); it
    # invokes nothing, and writes the table itself (no API URL: it is the API)
    api = _environment(sam_template, "ApiFunction")
    executor = _environment(sam_template, "ExecutorFunction")
    assert api["PUNCTUAL_TENANT_MAP"] == {"Ref": "TenantMap"}
    for name in ("PUNCTUAL_ALLOWED_TARGETS", "PUNCTUAL_ALLOWED_TARGET_ARNS"):
        assert api[name] == executor[name], name
    for name in (
        "PUNCTUAL_EXECUTOR_FUNCTION",
        "PUNCTUAL_DEAD_LETTER_QUEUE_URL",
        "PUNCTUAL_API_URL",
        "PUNCTUAL_API_TOKEN",
    ):
        assert name not in api, name


def test_the_executor_and_the_poller_get_the_api_tenant_map(sam_template: dict[str, Any]) -> None:
    # Given each function's merged environment  Then the executor gets the same tenant map as the API function
    # (it checks a tenant's task against its tenant's entry when it fires), and so does the poller (it admits a
    # schedule's occurrences against its tenant's active_tasks; it reads the map only then, so a bad one stops no
    # cold start); the fast path, which only hands tasks over, does not
    for function in ("ApiFunction", "ExecutorFunction", "PollerFunction"):
        env = _environment(sam_template, function)
        assert env["PUNCTUAL_TENANT_MAP"] == {"Ref": "TenantMap"}, function
        assert env["PUNCTUAL_TENANT_MAP_PARAMETER"] == {
            "Fn::If": ["HasTenantMapPath", {"Fn::Sub": "${TenantMapPath}/"}, {"Ref": "TenantMapParameter"}]
        }, function
    env = _environment(sam_template, "FastPathFunction")
    assert not {"PUNCTUAL_TENANT_MAP", "PUNCTUAL_TENANT_MAP_PARAMETER"} & set(env)


SHORT_TENANT_MAP = (
    '{"arn:aws:iam::123456789012:role/AcmeScheduler": "acme", "arn:aws:iam::123456789012:user/ci": "globex"}'
)
# The full form: principals, each tenant's own targets, target ARNs and quotas, and default quotas.
FULL_TENANT_MAP = json.dumps(
    {
        "principals": {
            "arn:aws:iam::123456789012:role/AcmeScheduler": "acme",
            "arn:aws:iam::123456789012:user/ci": "globex",
        },
        "tenants": {
            "acme": {
                "targets": ["hooks.acme.example:443"],
                "target_arns": ["arn:aws:sqs:us-east-1:123456789012:acme-jobs"],
                "quotas": {"active_tasks": 50000},
            },
            "globex": {"targets": ["10.0.0.0/24"]},
        },
        "quotas": {"active_tasks": 10000},
    }
)


def _full_form_is_read() -> bool:
    """Whether :class:`punctual.config.tenant_map.TenantMap` reads the full form yet (the short form it always has)."""
    try:
        TenantMap.parse('{"principals": {}, "tenants": {}}')
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("value", ["default", SHORT_TENANT_MAP, FULL_TENANT_MAP])
def test_the_tenant_map_parameter_is_a_valid_setting(sam_template: dict[str, Any], value: str) -> None:
    # Given TenantMap's default, or a map in either form  Then Settings accepts it (a bad map would fail every
    # cold start of the API function and the executor) and its length limit admits it
    if value == FULL_TENANT_MAP and not _full_form_is_read():
        pytest.skip("punctual.config.tenant_map.TenantMap does not read the full form yet")
    parameter = sam_template["Parameters"]["TenantMap"]
    text = parameter["Default"] if value == "default" else value
    assert len(text) <= parameter["MaxLength"]
    settings = Settings.from_env({"PUNCTUAL_TENANT_MAP": text})
    assert settings.tenant_map == text


def test_the_tenant_map_parameter_describes_both_forms(sam_template: dict[str, Any]) -> None:
    # Given TenantMap's description (what `sam deploy --guided` and the console show)  Then it names both forms
    # and every function that gets the map
    description = " ".join(sam_template["Parameters"]["TenantMap"]["Description"].split())
    for part in (
        '{"arn:aws:iam::123456789012:role/AcmeScheduler": "acme"}',
        '"principals"',
        '"tenants"',
        '"targets"',
        '"target_arns"',
        '"quotas"',
        "API function",
        "executor",
        "4 KB",
    ):
        assert part in description, part


# The longest value each Ref may take, where no parameter limit says it: a table name (DynamoDB allows 255
# characters), a queue URL (https://sqs.<region>.amazonaws.com/<account>/<name of 80 at most>), a region.
LONGEST_REF = {
    "TasksTable": 255,
    "TaskDeadLetterQueue": 8 + 4 + 14 + 15 + 13 + 80,
    "AWS::Region": 14,
    "ExecutorFunction.Alias": 15
    + 14
    + 1
    + 12
    + 10
    + 64
    + 1
    + 4,  # arn:aws:lambda:<region>:<account>:function:<name>:live
}
LAMBDA_ENVIRONMENT_BYTES = 4096
ALLOWLIST_BUDGET = 200  # what at least remains for AllowedTargets and ActionTargetArns, which have no limit


def _longest(sam_template: dict[str, Any], value: Any) -> int:  # noqa: PLR0911 - one return per kind of value, as the docstring lists them
    """The longest a variable's value can be: a literal's length, a parameter's MaxLength, the longest of its
    AllowedValues or the digits of its MaxValue, or :data:`LONGEST_REF`."""
    if not isinstance(value, dict):
        return len(str(value))
    if "Fn::If" in value:  # [condition, if true, if false]
        return max(_longest(sam_template, branch) for branch in value["Fn::If"][1:])
    if "Fn::FindInMap" in value:  # the longest value of the attribute over the map's keys
        mapping, _, attribute = value["Fn::FindInMap"]
        return max(len(str(entry[attribute])) for entry in sam_template["Mappings"][mapping].values())
    if "Fn::Sub" in value:  # each ${Name} at its longest, the literal text as it is
        text = sub_text(value)
        return len(SUB_VARIABLE.sub("", text)) + sum(
            _longest(sam_template, {"Ref": name}) for name in SUB_VARIABLE.findall(text)
        )
    name = value["Ref"]
    parameter = sam_template["Parameters"].get(name)
    if parameter is None:
        return LONGEST_REF[name]
    if "MaxLength" in parameter:
        return int(parameter["MaxLength"])
    if "AllowedValues" in parameter:
        return max(len(str(v)) for v in parameter["AllowedValues"])
    return len(str(parameter["MaxValue"]))


@pytest.mark.parametrize("function", ["ApiFunction", "ExecutorFunction", "PollerFunction"])
def test_the_tenant_map_fits_the_environment(sam_template: dict[str, Any], function: str) -> None:
    # Given a function that gets the tenant map, every variable at its longest (JSON quoting included) and the
    # allowlists left out  Then TenantMap's MaxLength leaves room for them within Lambda's 4 KB of variables
    env = _environment(sam_template, function)
    assert env["PUNCTUAL_TENANT_MAP"] == {"Ref": "TenantMap"}
    allowlists = {"PUNCTUAL_ALLOWED_TARGETS", "PUNCTUAL_ALLOWED_TARGET_ARNS"}
    size = sum(len(name) + _longest(sam_template, value) + 6 for name, value in env.items() if name not in allowlists)
    assert size + ALLOWLIST_BUDGET <= LAMBDA_ENVIRONMENT_BYTES, size


def _poll_interval_ms(sam_template: dict[str, Any], polls_per_minute: object) -> int:
    """PUNCTUAL_POLL_INTERVAL_MS as CloudFormation resolves it for a PollsPerMinute (a Ref is a string)."""
    lookup = _environment(sam_template, "PollerFunction")["PUNCTUAL_POLL_INTERVAL_MS"]["Fn::FindInMap"]
    mapping, key, attribute = lookup
    assert key == {"Ref": "PollsPerMinute"}
    return int(sam_template["Mappings"][mapping][str(polls_per_minute)][attribute])


def test_the_poll_interval_setting_is_the_poller_schedule_over_polls_per_minute(sam_template: dict[str, Any]) -> None:
    # Given the poller's schedule and each value PollsPerMinute allows
    schedule = sam_template["Resources"]["PollerFunction"]["Properties"]["Events"]["EveryMinute"]["Properties"]
    assert schedule["Schedule"] == "rate(1 minute)"
    allowed = sam_template["Parameters"]["PollsPerMinute"]["AllowedValues"]
    assert allowed == [1, 2, 3, 4, 5, 6]
    assert sam_template["Parameters"]["PollsPerMinute"]["Default"] == 1
    # Then PUNCTUAL_POLL_INTERVAL_MS is the minute divided by it, which the poller polls that many times in
    for polls in allowed:
        interval = _poll_interval_ms(sam_template, polls)
        assert interval == 60_000 // polls
        assert sub_polls(Settings(poll_interval_ms=interval, lead_ms=interval + 10_000)) == polls
    # And every function, the poller and the fast path above all (which leaves to the next poll what it dispatches
    # in time), reads the same lookup: no function overrides it
    values = {json.dumps(_environment(sam_template, f)["PUNCTUAL_POLL_INTERVAL_MS"]) for f in FUNCTIONS}
    assert len(values) == 1
    for function in ("PollerFunction", "FastPathFunction"):
        own = sam_template["Resources"][function]["Properties"].get("Environment", {}).get("Variables", {})
        assert "PUNCTUAL_POLL_INTERVAL_MS" not in own


def test_the_least_lead_covers_the_shortest_poll_interval(sam_template: dict[str, Any]) -> None:
    # Given LeadMs's least value and the shortest poll interval (six polls a minute)  Then the settings accept the
    # pair, and not a millisecond less lead: LeadMs's MinValue is the bound the cold start checks
    interval = _poll_interval_ms(sam_template, 6)
    least = sam_template["Parameters"]["LeadMs"]["MinValue"]
    assert Settings(poll_interval_ms=interval, lead_ms=least).lead_ms == least
    with pytest.raises(ValueError, match="must be at least poll_interval_ms"):
        Settings(poll_interval_ms=interval, lead_ms=least - 1)


def test_powertools_writes_where_the_dashboard_reads(sam_template: dict[str, Any]) -> None:
    # Given the Powertools variables  Then metrics land in punctual.runtime.metrics' namespace and service dimension
    env = sam_template["Globals"]["Function"]["Environment"]["Variables"]
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == metrics.NAMESPACE
    assert env["POWERTOOLS_SERVICE_NAME"] == metrics.SERVICE


@pytest.mark.parametrize("bound", ["Default", "MinValue", "MaxValue"])
def test_every_accepted_parameter_value_is_a_valid_setting(sam_template: dict[str, Any], bound: str) -> None:
    # Given the default, smallest and largest value CloudFormation accepts for each numeric parameter that
    # feeds a setting  Then Settings accepts it too (a deploy never starts functions that fail at cold start)
    parameters = sam_template["Parameters"]
    env = {}
    for name, value in _environment(sam_template, "ExecutorFunction").items():
        if name.startswith(ENV_PREFIX) and isinstance(value, dict) and value.get("Ref") in parameters:
            parameter = parameters[value["Ref"]]
            if parameter["Type"] == "Number" and bound in parameter:
                env[name] = str(parameter[bound])
    assert len(env) >= 4
    # ... the poll interval at the PollsPerMinute a lead at that bound pairs with (the least lead: the most polls)
    allowed = parameters["PollsPerMinute"]["AllowedValues"]
    polls = {"Default": parameters["PollsPerMinute"]["Default"], "MinValue": max(allowed), "MaxValue": min(allowed)}
    env["PUNCTUAL_POLL_INTERVAL_MS"] = str(_poll_interval_ms(sam_template, polls[bound]))
    Settings.from_env(env, table_name="punctual-tasks")


# -- the parameters that lift a ceiling: ranges against the settings' bounds, and where each value goes ------------
# Where the template's range is narrower than its setting's, and why. LeadMs: the executor's timeout of 300 s covers a
# lead of at most 180 s plus the longest action, arming and recording (ExecutorFunction's comment). ExecutorBatchSize:
# a batch's event must fit an asynchronous invocation (below); locally a batch may be larger (the benchmarks' ids
# are short, and the local invoker passes events in memory).
NARROWER_THAN_THE_SETTING = {"LeadMs", "ExecutorBatchSize"}
ASYNC_PAYLOAD_BYTES = 256 * 1024  # Lambda: an asynchronous invocation's payload
# The functions' memory sizes: Lambda's range (128 MB to 10,240 MB), which Settings.executor_memory_mb holds too.
MEMORY_PARAMETERS = {
    "PollerFunction": "PollerMemorySize",
    "ExecutorFunction": "ExecutorMemorySize",
    "FastPathFunction": "FastPathMemorySize",
    "ApiFunction": "ApiMemorySize",
}


def _bounds(field: str) -> tuple[int | None, int | None]:
    """A Settings field's smallest and largest accepted value (its ``ge`` and ``le``)."""
    metadata = Settings.model_fields[field].metadata
    low = [m.ge for m in metadata if hasattr(m, "ge")]
    high = [m.le for m in metadata if hasattr(m, "le")]
    return (low[0] if low else None), (high[0] if high else None)


def _numeric_settings(sam_template: dict[str, Any]) -> dict[str, str]:
    """Every Settings field a Number parameter sets in some function's environment: field -> parameter."""
    parameters = sam_template["Parameters"]
    found: dict[str, str] = {}
    for function in FUNCTIONS:
        for name, value in _environment(sam_template, function).items():
            branches = value["Fn::If"][1:] if isinstance(value, dict) and "Fn::If" in value else [value]
            for branch in branches:
                ref = branch.get("Ref") if isinstance(branch, dict) else None
                if name.startswith(ENV_PREFIX) and ref in parameters and parameters[ref]["Type"] == "Number":
                    found[name[len(ENV_PREFIX) :].lower()] = str(ref)
    return found


def test_each_numeric_parameters_range_is_its_settings_bounds(sam_template: dict[str, Any]) -> None:
    # Given every Number parameter that sets a Settings field  Then CloudFormation accepts exactly what the setting
    # accepts (one source of truth: a value the template lets through never fails a cold start, and the template
    # refuses nothing the code could run with), but where NARROWER_THAN_THE_SETTING says why it is narrower
    fields = _numeric_settings(sam_template)
    assert {"shard_count", "poll_groups", "max_batch_size", "executor_memory_mb", "executor_concurrency"} <= set(fields)
    for field, name in fields.items():
        parameter = sam_template["Parameters"][name]
        low, high = _bounds(field)
        if name in NARROWER_THAN_THE_SETTING:
            assert low <= parameter["MinValue"] <= parameter["MaxValue"] <= high, name
        else:
            assert (parameter.get("MinValue"), parameter.get("MaxValue")) == (low, high), name


def test_each_memory_parameters_range_is_lambdas(sam_template: dict[str, Any], cfn_resources: dict[str, Any]) -> None:
    # Given each function's memory parameter  Then its range is Lambda's, as the executor's memory setting holds it,
    # and the function (as CloudFormation gets it) takes its MemorySize from it
    low, high = _bounds("executor_memory_mb")
    for function, name in MEMORY_PARAMETERS.items():
        parameter = sam_template["Parameters"][name]
        assert (parameter["Type"], parameter["MinValue"], parameter["MaxValue"]) == ("Number", low, high), name
        assert cfn_resources[function]["Properties"]["MemorySize"] == {"Ref": name}, function


# The table's capacity parameters (PROVISIONED only), which set no Settings field: their ranges are DynamoDB's. A table
# or an index is provisioned 1 unit at least, and 40,000 read and 40,000 write units at most by the default per-table
# quota (DynamoDB's "Quotas" page); Application Auto Scaling targets 20% to 90% utilization of DynamoDB capacity.
DYNAMODB_CAPACITY_UNITS = (1, 40_000)
DYNAMODB_TARGET_UTILIZATION = (20, 90)
CAPACITY_PARAMETERS = {
    "TableMinWriteCapacity": DYNAMODB_CAPACITY_UNITS,
    "TableMaxWriteCapacity": DYNAMODB_CAPACITY_UNITS,
    "TableMinReadCapacity": DYNAMODB_CAPACITY_UNITS,
    "TableMaxReadCapacity": DYNAMODB_CAPACITY_UNITS,
    "TableTargetUtilization": DYNAMODB_TARGET_UTILIZATION,
}


def test_each_table_capacity_parameters_range_is_dynamodbs(sam_template: dict[str, Any]) -> None:
    # Given each capacity parameter of the table  Then CloudFormation accepts exactly what DynamoDB and its auto scaling
    # accept, and its default is within it
    for name, (low, high) in CAPACITY_PARAMETERS.items():
        parameter = sam_template["Parameters"][name]
        assert (parameter["Type"], parameter["MinValue"], parameter["MaxValue"]) == ("Number", low, high), name
        assert low <= parameter["Default"] <= high, name
    assert {n for n in sam_template["Parameters"] if n.startswith("Table") and "Capacity" in n} <= set(
        CAPACITY_PARAMETERS
    )


def test_the_batch_size_reaches_the_functions_that_cut_batches(cfn_resources: dict[str, Any]) -> None:
    # Given the functions as CloudFormation gets them  Then the poller and the fast path (which cut batches) get
    # ExecutorBatchSize, the executor and the API (which cut none) do not, and the poller gets PollGroups
    def variables(function: str) -> dict[str, Any]:
        return dict(cfn_resources[function]["Properties"]["Environment"]["Variables"])

    for function in ("PollerFunction", "FastPathFunction"):
        assert variables(function)["PUNCTUAL_MAX_BATCH_SIZE"] == {"Ref": "ExecutorBatchSize"}, function
    for function in ("ExecutorFunction", "ApiFunction"):
        assert "PUNCTUAL_MAX_BATCH_SIZE" not in variables(function), function
    assert variables("PollerFunction")["PUNCTUAL_POLL_GROUPS"] == {"Ref": "PollGroups"}


def test_the_largest_batch_the_template_allows_fits_an_async_invocation(sam_template: dict[str, Any]) -> None:
    # Given a batch of ExecutorBatchSize's largest value, each task's id and every field at its longest
    largest = int(sam_template["Parameters"]["ExecutorBatchSize"]["MaxValue"])
    task = BatchTask(
        task_id="t" * 40 + "/" + "x" * 128,  # a tenant's name and a task's name at their longest
        due_ms=MAX_MS,
        grace_ms=86_400_000,
        misfire_policy=max(MISFIRE_POLICIES, key=len),
        held=True,
    )
    assert is_valid_task_id(task.task_id)
    event = BatchEvent(batch_id="b" * 32, dispatcher="fastpath-" + "d" * 64, tasks=[task] * largest)
    # When the poller sends it (JSON, as punctual.polling.invoker encodes it)
    size = len(json.dumps(event.model_dump(mode="json", exclude_unset=True)).encode())
    # Then it fits the payload Lambda accepts for an asynchronous invocation (a larger one would fail at every poll)
    assert size <= ASYNC_PAYLOAD_BYTES, size
