"""What Lambda applies to a function, read from a template, and its async-invoke decisions (retry delays,
throttle backoff, event age, concurrency)."""

from __future__ import annotations

from pathlib import Path

import pytest

from punctual_tools.local.lambda_rules import (
    EXECUTOR_FUNCTION,
    LAMBDA_DEFAULT_EVENT_AGE_S,
    TEMPLATE_FUNCTIONS,
    FunctionLimits,
    concurrency_cap,
    is_expired,
    read_function_limits,
    retry_delay_s,
    throttle_backoff_s,
)
from punctual_tools.template import load_template


# -- the decisions ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("retry", "delay"), [(1, 60.0), (2, 120.0)])
def test_lambda_retries_a_failed_async_invocation_after_1_then_2_minutes(retry: int, delay: float) -> None:
    assert retry_delay_s(retry) == delay


@pytest.mark.parametrize("retry", [0, 3])
def test_there_is_no_retry_before_the_first_or_after_the_second(retry: int) -> None:
    with pytest.raises(ValueError, match="at most 2"):
        retry_delay_s(retry)


@pytest.mark.parametrize(("throttles", "delay"), [(1, 1.0), (2, 2.0), (3, 4.0), (9, 256.0), (10, 300.0), (1000, 300.0)])
def test_a_throttled_event_backs_off_from_1_s_doubling_up_to_5_minutes(throttles: int, delay: float) -> None:
    assert throttle_backoff_s(throttles) == delay


def test_an_event_is_expired_only_past_the_maximum_age() -> None:
    limits = FunctionLimits(max_event_age_s=300)
    assert not is_expired(300.0, limits)
    assert is_expired(300.001, limits)


@pytest.mark.parametrize(("reserved", "local_cap", "cap"), [(None, 64, 64), (100, 64, 64), (5, 64, 5), (1, 1, 1)])
def test_the_concurrency_is_the_reservation_within_the_local_cap(
    reserved: int | None, local_cap: int, cap: int
) -> None:
    assert concurrency_cap(FunctionLimits(reserved_concurrency=reserved), local_cap) == cap


def test_the_cpu_share_is_the_memory_size_over_1769_mb() -> None:
    assert FunctionLimits(memory_mb=1769).cpu_share == 1.0
    assert FunctionLimits(memory_mb=256).cpu_share == pytest.approx(0.1447, abs=1e-4)


# -- reading the template -----------------------------------------------------------------------------------------
def test_the_executor_limits_are_read_from_the_project_template() -> None:
    # Given the project's template  When the executor's limits are read
    limits = read_function_limits(EXECUTOR_FUNCTION)
    # Then each is what the template says, parameters at their defaults
    template = load_template()
    props = template["Resources"][EXECUTOR_FUNCTION]["Properties"]
    params = template["Parameters"]
    assert limits.memory_mb == int(params["ExecutorMemorySize"]["Default"])
    assert limits.timeout_s == float(props["Timeout"])
    assert limits.max_retry_attempts == props["EventInvokeConfig"]["MaximumRetryAttempts"]
    assert limits.max_event_age_s == props["EventInvokeConfig"]["MaximumEventAgeInSeconds"]
    reserved = str(params.get("ExecutorReservedConcurrency", {}).get("Default", "")).strip()
    if "ReservedConcurrentExecutions" in props and reserved not in ("", "0"):
        assert limits.reserved_concurrency == int(reserved)
    else:
        assert limits.reserved_concurrency is None


@pytest.mark.parametrize("function", TEMPLATE_FUNCTIONS)
def test_every_function_of_the_project_template_is_read(function: str) -> None:
    # Given the project's template  When a function's limits are read (what `punctual up` prints for each)
    limits = read_function_limits(function)
    # Then its reservation is resolved through its condition: its parameter's default, 0 or empty leaving the
    # function unreserved
    template = load_template()
    reserved = template["Resources"][function]["Properties"].get("ReservedConcurrentExecutions")
    if reserved is None:
        assert limits.reserved_concurrency is None
    else:
        _, parameter, _ = reserved["Fn::If"]
        default = str(template["Parameters"][parameter["Ref"]]["Default"]).strip()
        assert limits.reserved_concurrency == (None if default in ("", "0") else int(default))
    assert limits.timeout_s == float(template["Resources"][function]["Properties"]["Timeout"])


TEMPLATE = """
Parameters:
  Memory: {{Type: Number, Default: 512}}
  Reserved: {{Type: String, Default: "{reserved}"}}
Conditions:
  HasReserved: !And
    - !Not [!Equals [!Ref Reserved, ""]]
    - !Not [!Equals [!Ref Reserved, "0"]]
Globals:
  Function:
    Timeout: 42
Resources:
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      MemorySize: !Ref Memory
      ReservedConcurrentExecutions: !If [HasReserved, !Ref Reserved, !Ref AWS::NoValue]
      AutoPublishAlias: live
      EventInvokeConfig:
        MaximumRetryAttempts: 1
  Bare:
    Type: AWS::Serverless::Function
    Properties:
      Handler: app.handler
  Plain:
    Type: AWS::Lambda::Function
    Properties:
      Timeout: 9
  PlainInvokeConfig:
    Type: AWS::Lambda::EventInvokeConfig
    Properties:
      FunctionName: !Ref Plain
      Qualifier: $LATEST
      MaximumRetryAttempts: 0
      MaximumEventAgeInSeconds: 60
"""


@pytest.mark.parametrize(("reserved", "expected"), [("7", 7), ("0", None), ("", None)])
def test_refs_conditions_globals_and_no_value_resolve_as_cloudformation_would(
    tmp_path: Path, reserved: str, expected: int | None
) -> None:
    # Given a template with a parameter's Ref, a reservation under a condition, and Globals
    path = tmp_path / f"template-{reserved or 'empty'}.yaml"
    path.write_text(TEMPLATE.format(reserved=reserved))
    # When the function's limits are read
    limits = read_function_limits("Fn", str(path))
    # Then the memory is the parameter's default, the timeout the Globals', the reservation set only when the
    # condition holds, the retries the invoke config's and the event age Lambda's default
    assert limits == FunctionLimits(
        function="Fn",
        memory_mb=512,
        timeout_s=42.0,
        reserved_concurrency=expected,
        max_retry_attempts=1,
        max_event_age_s=LAMBDA_DEFAULT_EVENT_AGE_S,
        alias="live",
    )


def test_what_a_function_does_not_set_is_lambdas_default(tmp_path: Path) -> None:
    path = tmp_path / "template.yaml"
    path.write_text(TEMPLATE.format(reserved="0"))
    # A SAM function with nothing set takes the Globals' timeout and Lambda's other defaults
    assert read_function_limits("Bare", str(path)) == FunctionLimits(function="Bare", timeout_s=42.0)
    # A plain Lambda function ignores SAM's Globals and takes an EventInvokeConfig resource naming it
    assert read_function_limits("Plain", str(path)) == FunctionLimits(
        function="Plain", timeout_s=9.0, max_retry_attempts=0, max_event_age_s=60.0
    )


def test_an_unknown_function_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "template.yaml"
    path.write_text(TEMPLATE.format(reserved="0"))
    with pytest.raises(ValueError, match="no resource Missing"):
        read_function_limits("Missing", str(path))


def test_a_limit_line_says_memory_cpu_timeout_retries_age_and_concurrency() -> None:
    line = FunctionLimits(
        "ExecutorFunction", memory_mb=256, timeout_s=300, reserved_concurrency=100, max_event_age_s=300
    ).describe(local_cap=64)
    assert line == (
        "ExecutorFunction: 256 MB (0.145 of a core), timeout 300 s, 2 retries (after 1 min, 2 min), "
        "events dropped after 300 s, reserved concurrency 100 (local cap 64)"
    )
