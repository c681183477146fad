"""The executor's timeout, retries and event age agree, as Lambda applies them to an async invocation.

Lambda retries an async invocation that failed (an error, a crash, the timeout) about one minute after the first
attempt ends and two minutes after the second, and drops an event older than ``MaximumEventAgeInSeconds`` instead
of running it (Lambda developer guide, "Asynchronous invocation"). A batch that runs into its timeout is retried
only if its event is still young enough then: each retry's age is the attempts before it, each a whole timeout, and
the waits between them. The local runtime applies the same rules (``punctual_tools.local.lambda_rules``).
"""

from __future__ import annotations

from typing import Any

import pytest

from punctual_tools.local.lambda_rules import (
    EXECUTOR_FUNCTION,
    LAMBDA_DEFAULT_EVENT_AGE_S,
    RETRY_DELAYS_S,
    is_expired,
    read_function_limits,
    retry_delay_s,
)

MARGIN_S = 60  # Lambda's waits are approximate: a retry a little late must still find its event young enough


def age_at_retry_s(timeout_s: float, retry: int) -> float:
    """How old an event is when Lambda starts retry ``retry`` (1, 2), every attempt before it having run into the
    timeout: ``retry`` timeouts and the waits after each."""
    return retry * timeout_s + sum(RETRY_DELAYS_S[:retry])


def _executor(cfn_resources: dict[str, Any]) -> tuple[float, int, float]:
    """The executor's Timeout, MaximumRetryAttempts and MaximumEventAgeInSeconds, as CloudFormation gets them (on the
    alias the poller and the fast path invoke)."""
    config = cfn_resources["ExecutorFunctionEventInvokeConfig"]["Properties"]
    assert config["Qualifier"] == "live"
    timeout = cfn_resources["ExecutorFunction"]["Properties"]["Timeout"]
    return float(timeout), int(config["MaximumRetryAttempts"]), float(config["MaximumEventAgeInSeconds"])


def test_the_retry_ages_are_lambdas_waits_after_whole_timeouts() -> None:
    # Given a 300 s timeout  Then the first retry of a timed-out invocation starts at 360 s, the second at 780 s
    assert age_at_retry_s(300, 1) == 300 + 60 == 300 + retry_delay_s(1)
    assert age_at_retry_s(300, 2) == 2 * 300 + 60 + 120


def test_every_retry_of_a_timed_out_executor_can_run(cfn_resources: dict[str, Any]) -> None:
    # Given the executor's timeout, retries and event age
    timeout, retries, max_age = _executor(cfn_resources)
    assert retries >= 1
    # Then each retry of a batch that ran into its timeout starts while its event is younger than the maximum age,
    # with a margin, and the age is one Lambda accepts (at most 6 hours)
    for retry in range(1, retries + 1):
        assert max_age >= age_at_retry_s(timeout, retry) + MARGIN_S, (retry, max_age)
    assert max_age <= LAMBDA_DEFAULT_EVENT_AGE_S


@pytest.mark.parametrize("retry", [1, 2])
def test_the_local_runtime_runs_the_retries_of_a_timed_out_executor(cfn_resources: dict[str, Any], retry: int) -> None:
    # Given the executor's limits as the local runtime reads them from the template
    limits = read_function_limits(EXECUTOR_FUNCTION)
    timeout, retries, max_age = _executor(cfn_resources)
    assert (limits.timeout_s, limits.max_retry_attempts, limits.max_event_age_s) == (timeout, retries, max_age)
    # When a batch has run into its timeout before retry ``retry``  Then the runtime does not drop its event
    assert not is_expired(age_at_retry_s(limits.timeout_s, retry), limits)
