"""The local runtime's settings: :class:`punctual.settings.Settings` plus what only one machine needs.

The Lambdas load :class:`~punctual.settings.Settings`; the local stack and its executor workers load
:class:`LocalSettings`, which adds CPU confinement, the fire log, DynamoDB Local's JVM options and the workers'
timeout. Each is read from ``PUNCTUAL_<FIELD NAME IN UPPER CASE>`` by the same ``from_env``.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from punctual.priority import parse_cpu_list
from punctual.settings import Settings


class LocalSettings(Settings):
    """Settings of the local runtime (``punctual up``, the demo, the benchmark, the end-to-end tests).

    The stack builds them (:class:`~punctual_tools.local.stack.LocalStack`) and hands them to its executor
    workers as ``PUNCTUAL_*`` variables; a worker applies the CPU confinement and opens the fire log before
    it loads the executor handler, which reads only the :class:`~punctual.settings.Settings` part.
    """

    background_cpus: str | None = Field(
        None, description='CPUs background work (store, poll, arm, record) may use, e.g. "1" or "1-3"; unset: the '
        "stack leaves the first usable CPU out, so that a firing thread always finds one free",
    )
    realtime_firing: bool = Field(
        True, description="dispatcher and worker threads run SCHED_FIFO where the system allows it (root, "
        "CAP_SYS_NICE or RLIMIT_RTPRIO); elsewhere they stay normal. See punctual.priority",
    )
    fire_log_path: str | None = Field(None, description="JSON-lines file the log action appends each fire to")
    dynamodb_java_opts: str | None = Field(
        None, description="JVM options of DynamoDB Local, split on spaces; unset: the stack's lean defaults",
    )
    receiver_port: int = Field(
        8767, ge=1, le=65_535, description="the loopback port of the demo's webhook receiver: the local tenants "
        "may reach it (and no other loopback port) unless PUNCTUAL_TENANT_MAP says otherwise",
    )
    local_timeout_s: float = Field(900.0, gt=0, le=900, description="an executor worker's invocation timeout "
                                   "(what the handler's context reports as remaining time; Lambda's at most)")

    @field_validator("background_cpus")
    @classmethod
    def _cpu_list(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parse_cpu_list(value)  # a clear error now rather than at the first lowered thread
        return value.strip()
