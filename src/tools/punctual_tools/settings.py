"""The local runtime's settings: :class:`punctual.config.settings.Settings` plus what only one machine needs.

The Lambdas load :class:`~punctual.config.settings.Settings`; the local stack and its executor workers load
:class:`LocalSettings`, which adds the profile (Lambda's limits or the whole machine), CPU confinement, the fire
log, DynamoDB Local's JVM options, the executor's timeout and the store's latency model. Each is read from
``PUNCTUAL_<FIELD NAME IN UPPER CASE>`` by the same ``from_env``.

The profile sets two defaults a variable may override: ``write_batch`` (``single`` under lambda, as the
functions write in AWS; ``transaction`` under local, kinder to the CPU of DynamoDB Local) and ``store_latency``
(``dynamodb-in-region`` under lambda; ``none`` under local).
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from punctual.config.settings import Settings
from punctual.executing.priority import parse_cpu_list


class LocalSettings(Settings):
    """Settings of the local runtime (``punctual up``, the demo, the benchmark, the end-to-end tests).

    The stack builds them (:class:`~punctual_tools.local.stack.LocalStack`) and hands them to its executor
    workers as ``PUNCTUAL_*`` variables; a worker applies the CPU confinement and opens the fire log before
    it loads the executor handler, which reads only the :class:`~punctual.config.settings.Settings` part.
    """

    profile: Literal["lambda", "local"] = Field(
        "lambda",
        description='"lambda": each executor as Lambda runs it, by its configuration in template.yaml (the '
        "CPU share its memory size buys, killed at its timeout, frozen while idle, async retries, event age and "
        'throttling), firing at normal priority; "local": for a stack on a server of its own, whole cores and '
        "real-time firing, no freezing and no timeout (retries, event age and throttling as under lambda)",
    )
    lambda_time_scale: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Lambda's async delays (retries after 1 and 2 minutes, throttle backoff) and "
        "maximum event age, times this: 1 is Lambda's own; tests shorten them",
    )
    background_cpus: str | None = Field(
        None,
        description='CPUs background work (store, poll, arm, record) may use, e.g. "1" or "1-3"; unset: the '
        "stack leaves the first usable CPU out, so that a firing thread always finds one free",
    )
    realtime_firing: bool | None = Field(
        None,
        description="dispatcher and worker threads run SCHED_FIFO where the system allows it (root, "
        "CAP_SYS_NICE or RLIMIT_RTPRIO); elsewhere they stay normal. See punctual.executing.priority. Unset: the "
        "profile's "
        "(on under local; off under lambda, which refuses it: Lambda gives no real-time priority)",
    )
    fire_log_path: str | None = Field(None, description="JSON-lines file the log action appends each fire to")
    dynamodb_java_opts: str | None = Field(
        None,
        description="JVM options of DynamoDB Local, split on spaces; unset: the stack's lean defaults",
    )
    receiver_port: int = Field(
        8767,
        ge=1,
        le=65_535,
        description="the loopback port of the demo's webhook receiver: the local tenants "
        "may reach it (and no other loopback port) unless PUNCTUAL_TENANT_MAP says otherwise",
    )
    local_timeout_s: float | None = Field(
        None,
        gt=0,
        le=900,
        description="the executor's timeout (s) instead of its Timeout in template.yaml: what "
        "its context reports as remaining time and, under the lambda profile, when it is killed",
    )

    store_latency: Literal["dynamodb-in-region", "none"] = Field(
        "dynamodb-in-region",
        description="the latency of every DynamoDB call the functions make (executors, poller, fast path, API): "
        '"dynamodb-in-region", a round trip to DynamoDB from Lambda in its region and the CPU of TLS (see '
        "punctual_tools.local.store_latency); \"none\", DynamoDB Local's own. Unset: the profile's (the model "
        "under lambda, none under local)",
    )
    store_latency_seed: int = Field(
        0, ge=0, description="the latency model's seed: each process draws from (this seed, its pid)"
    )

    @model_validator(mode="before")
    @classmethod
    def _profile_defaults(cls, data: Any) -> Any:
        """``write_batch`` and ``store_latency`` not given: the profile's (see the module's docstring)."""
        if not isinstance(data, dict):
            return data
        as_lambda = data.get("profile", "lambda") == "lambda"
        defaults = {
            "write_batch": "single" if as_lambda else "transaction",
            "store_latency": "dynamodb-in-region" if as_lambda else "none",
        }
        return {**data, **{name: value for name, value in defaults.items() if data.get(name) is None}}

    @property
    def firing_realtime(self) -> bool:
        """Whether firing threads ask for real-time scheduling: ``realtime_firing``, else the profile's default."""
        return self.profile == "local" if self.realtime_firing is None else self.realtime_firing

    @model_validator(mode="after")
    def _lambda_gives_no_realtime(self) -> Self:
        if self.profile == "lambda" and self.realtime_firing:
            raise ValueError(
                "PUNCTUAL_REALTIME_FIRING=true: Lambda gives no real-time priority, so the lambda "
                "profile refuses it (PUNCTUAL_PROFILE=local allows it)"
            )
        return self

    @field_validator("background_cpus")
    @classmethod
    def _cpu_list(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parse_cpu_list(value)  # a clear error now rather than at the first lowered thread
        return value.strip()
