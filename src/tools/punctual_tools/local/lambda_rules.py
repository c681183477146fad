"""What Lambda applies to one function, read from ``template.yaml``, and the rules of its async invoke.

:func:`read_function_limits` reads a function's ``MemorySize``, ``Timeout``, ``ReservedConcurrentExecutions``
and ``EventInvokeConfig`` (``MaximumRetryAttempts``, ``MaximumEventAgeInSeconds``) the way CloudFormation would
resolve them with every parameter at its default (:class:`~punctual_tools.template.intrinsics.Resolver`:
``!Ref`` to a parameter, ``!If`` on a condition, ``AWS::NoValue``), the template's ``Globals``, and Lambda's own
defaults for what is not set. The local runtime applies them (:mod:`punctual_tools.local.invoker`); ``punctual up``
prints them.

The async-invoke decisions are pure functions of the attempt or throttle count, in Lambda's real seconds; the
local runtime multiplies them by a time scale (1.0 unless a test shortens them):

- a failed invocation (error, crash, timeout) is retried up to ``MaximumRetryAttempts`` times, 1 minute after
  the first attempt and 2 minutes after the second (:func:`retry_delay_s`);
- an invocation throttled (no concurrency free) goes back to the queue and is tried again after 1 s, 2 s, 4 s, ...
  up to 5 minutes (:func:`throttle_backoff_s`); throttles are not retries;
- an event older than ``MaximumEventAgeInSeconds`` is never run (:func:`is_expired`); its age counts from its
  first enqueue, through its throttles, runs and retries, so an invocation killed at its timeout is retried only
  if the age leaves room for the timeout and the delay (:func:`retries_after_timeouts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from punctual.config.cpu_share import MB_PER_VCPU
from punctual_tools.template import NO_VALUE, Resolver, load_template

LAMBDA_DEFAULT_MEMORY_MB = 128
LAMBDA_DEFAULT_TIMEOUT_S = 3.0
LAMBDA_DEFAULT_RETRY_ATTEMPTS = 2
LAMBDA_DEFAULT_EVENT_AGE_S = 21_600.0  # 6 hours
RETRY_DELAYS_S = (60.0, 120.0)  # after the first failed attempt, after the second
THROTTLE_BACKOFF_FIRST_S = 1.0
THROTTLE_BACKOFF_MAX_S = 300.0
EXECUTOR_FUNCTION = "ExecutorFunction"
TEMPLATE_FUNCTIONS = ("ExecutorFunction", "PollerFunction", "FastPathFunction", "ApiFunction")


@dataclass(frozen=True)
class FunctionLimits:
    """One function's configuration as Lambda applies it (defaults: Lambda's for a function that sets none)."""

    function: str = "function"
    memory_mb: int = LAMBDA_DEFAULT_MEMORY_MB
    timeout_s: float = LAMBDA_DEFAULT_TIMEOUT_S
    reserved_concurrency: int | None = None  # None: unreserved (the account's pool)
    max_retry_attempts: int = LAMBDA_DEFAULT_RETRY_ATTEMPTS
    max_event_age_s: float = LAMBDA_DEFAULT_EVENT_AGE_S
    alias: str | None = None  # AutoPublishAlias: what the event source invokes (the limits are the same)

    @property
    def cpu_share(self) -> float:
        """The share of one core the memory size buys."""
        return self.memory_mb / MB_PER_VCPU

    def describe(self, local_cap: int | None = None) -> str:
        """One line for ``punctual up``: memory and CPU share, timeout, retries, event age, concurrency."""
        delays = ", ".join(f"{RETRY_DELAYS_S[i] / 60:g} min" for i in range(self.max_retry_attempts))
        retries = f"{self.max_retry_attempts} retries (after {delays})" if self.max_retry_attempts else "no retry"
        if self.reserved_concurrency is not None:
            concurrency = f"reserved concurrency {self.reserved_concurrency}"
        else:
            concurrency = "unreserved concurrency"
        if local_cap is not None:
            concurrency += f" (local cap {concurrency_cap(self, local_cap)})"
        return (
            f"{self.function}: {self.memory_mb} MB ({self.cpu_share:.3f} of a core), timeout {self.timeout_s:g} s, "
            f"{retries}, events dropped after {self.max_event_age_s:g} s, {concurrency}"
        )


# -- the async-invoke decisions ---------------------------------------------------------------------------------
def retry_delay_s(retry: int) -> float:
    """Seconds Lambda waits before retry number ``retry`` (1 or 2) of a failed async invocation."""
    if not 1 <= retry <= len(RETRY_DELAYS_S):
        raise ValueError(f"Lambda retries an async invocation at most {len(RETRY_DELAYS_S)} times, not {retry}")
    return RETRY_DELAYS_S[retry - 1]


def throttle_backoff_s(throttles: int) -> float:
    """Seconds before an event throttled ``throttles`` times (1, 2, ...) is tried again: 1 s doubling, at most
    5 minutes."""
    if throttles < 1:
        raise ValueError(f"an event is backed off after its first throttle, not after {throttles}")
    return min(THROTTLE_BACKOFF_MAX_S, THROTTLE_BACKOFF_FIRST_S * 2.0 ** min(throttles - 1, 30))


def is_expired(age_s: float, limits: FunctionLimits) -> bool:
    """Whether an event this old (seconds since it was queued) is dropped instead of run."""
    return age_s > limits.max_event_age_s


def retries_after_timeouts(limits: FunctionLimits) -> int:
    """How many times Lambda retries an async invocation that runs to its timeout at every attempt: each retry
    comes its delay after the attempt before it was killed, and is made only if the event is no older than its
    maximum age by then (Timeout + 60 s of age for the first, 2 x Timeout + 60 + 120 s for both).

    Examples
    --------
    >>> [retries_after_timeouts(FunctionLimits(timeout_s=300, max_event_age_s=age)) for age in (359, 360, 780)]
    [0, 1, 2]
    """
    age_s, retries = 0.0, 0
    while retries < limits.max_retry_attempts:
        age_s += limits.timeout_s + retry_delay_s(retries + 1)
        if is_expired(age_s, limits):
            break
        retries += 1
    return retries


def concurrency_cap(limits: FunctionLimits, local_cap: int) -> int:
    """How many invocations may run at once: the reserved concurrency, and never more than the local cap."""
    if limits.reserved_concurrency is None:
        return local_cap
    return min(limits.reserved_concurrency, local_cap)


# -- reading the template ---------------------------------------------------------------------------------------
def _number(value: Any, default: float, what: str) -> float:
    if value is NO_VALUE or (isinstance(value, str) and not value.strip()):
        return default
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}: {value!r} is not a number") from exc


def _invoke_config(template: dict[str, Any], function: str, props: dict[str, Any]) -> dict[str, Any]:
    """SAM's ``EventInvokeConfig`` property, or an ``AWS::Lambda::EventInvokeConfig`` resource for the function."""
    config = dict(props.get("EventInvokeConfig") or {})
    for resource in (template.get("Resources") or {}).values():
        if resource.get("Type") == "AWS::Lambda::EventInvokeConfig":
            rprops = resource.get("Properties") or {}
            if rprops.get("FunctionName") in ({"Ref": function}, function):
                config = {**config, **rprops}
    return config


def read_function_limits(function: str = EXECUTOR_FUNCTION, template_path: str | None = None) -> FunctionLimits:
    """``function``'s limits as ``template.yaml`` (or ``template_path``) configures them, parameters at their
    defaults; what the template does not set is Lambda's default. A ``ValueError`` names what cannot be read."""
    template = load_template(template_path)
    resource = (template.get("Resources") or {}).get(function)
    if resource is None:
        raise ValueError(f"the template has no resource {function}")
    globals_ = ((template.get("Globals") or {}).get("Function") or {}) if "Serverless" in resource["Type"] else {}
    props = {**globals_, **(resource.get("Properties") or {})}
    resolver = Resolver(template)
    invoke = _invoke_config(template, function, props)

    def number(container: dict[str, Any], key: str, default: float) -> float:
        return _number(resolver.resolve(container.get(key)), default, f"{function}.{key}")

    reserved = resolver.resolve(props.get("ReservedConcurrentExecutions"))
    alias = resolver.resolve(props.get("AutoPublishAlias"))
    return FunctionLimits(
        function=function,
        memory_mb=int(number(props, "MemorySize", LAMBDA_DEFAULT_MEMORY_MB)),
        timeout_s=number(props, "Timeout", LAMBDA_DEFAULT_TIMEOUT_S),
        reserved_concurrency=None
        if reserved is NO_VALUE
        else int(_number(reserved, 0, f"{function}.ReservedConcurrentExecutions")),
        max_retry_attempts=int(number(invoke, "MaximumRetryAttempts", LAMBDA_DEFAULT_RETRY_ATTEMPTS)),
        max_event_age_s=number(invoke, "MaximumEventAgeInSeconds", LAMBDA_DEFAULT_EVENT_AGE_S),
        alias=None if alias is NO_VALUE else str(alias),
    )
