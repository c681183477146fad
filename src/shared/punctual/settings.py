"""One validated settings object, read once from the environment by the adapters (handlers, CLI).

Services never read ``os.environ``: they receive a :class:`Settings` instance.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .priority import parse_cpu_list

ENV_PREFIX = "PUNCTUAL_"


_EMPTY_MEANS_OFF = frozenset({"ntp_server"})  # an explicit None / "" / "off" switches the feature off


class SettingsError(ValueError):
    """The environment holds a setting that does not validate."""


class Settings(BaseModel):
    """Everything the poller, the executor, the client and the local runtime can be tuned with.

    Each field can be set from the environment as ``PUNCTUAL_<FIELD NAME IN UPPER CASE>``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    table_name: str = Field("punctual-tasks", min_length=3, max_length=255)
    region: str = "us-east-1"
    endpoint_url: str | None = Field(None, description="DynamoDB endpoint; None means AWS itself")
    shard_count: int = Field(4, ge=1, le=256, description="shards per minute bucket in the due index")
    lead_ms: int = Field(90_000, ge=5_000, le=600_000, description="how far ahead of now the poller claims")
    poll_interval_ms: int = Field(60_000, ge=1_000, le=600_000)
    fast_path_margin_ms: int = Field(
        10_000, ge=0, le=600_000,
        description="a task written due sooner than poll interval + this goes to the stream fast path",
    )
    claim_lease_ms: int = Field(30_000, ge=1_000, description="how long a claim waits for its executor to arm")
    arm_margin_ms: int = Field(30_000, ge=1_000, description="armed lease beyond due + grace + action timeout")
    overdue_safety_ms: int = Field(
        180_000, ge=60_000, description="the poller never moves its watermark closer to now than this"
    )
    max_batch_size: int = Field(250, ge=1, le=5_000)
    default_misfire_grace_ms: int = Field(60_000, ge=0, le=86_400_000)
    max_horizon_days: int = Field(366, ge=1, le=3_660)
    max_payload_bytes: int = Field(256 * 1024, ge=1, le=350 * 1024)
    ntp_server: str | None = Field("time.aws.com", description='"host[:port]"; "off" (or empty) disables NTP')
    ntp_timeout_s: float = Field(0.5, gt=0, le=5)
    executor_function: str = "punctual-executor"
    worker_threads: int = Field(32, ge=1, le=512, description="action worker threads per executor")
    db_threads: int = Field(8, ge=1, le=64, description="threads for claim / arm / record writes")
    write_batch: Literal["single", "transaction"] = Field(
        "single",
        description="many claims / arms / records as single UpdateItems in parallel (AWS: 1 write unit each) or "
        "as TransactWriteItems of up to 100 (2 units each, but ~10x less CPU per item: the local runtime's choice)",
    )
    background_cpus: str | None = Field(
        None, description='CPUs background work (store, poll, arm, record) may use, e.g. "1" or "1-3"; unset: any. '
        "The local runtime leaves one core out, so that a firing thread always finds one free",
    )
    retention_days: int = Field(
        30, ge=1, le=3_650, description="finished tasks carry expires_at = finished + this; DynamoDB TTL deletes them"
    )
    dead_letter_queue_url: str | None = Field(None, description="SQS queue for tasks that exhaust their retries")
    dead_letter_path: str | None = Field(
        None, description="local only: JSON-lines file standing in for the SQS dead-letter queue (when no URL is set)"
    )
    fire_log_path: str | None = Field(None, description="local only: JSON-lines file the log action appends to")

    @field_validator("background_cpus")
    @classmethod
    def _cpu_list(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parse_cpu_list(value)  # a clear error now rather than at the first lowered thread
        return value.strip()

    @field_validator("ntp_server", mode="before")
    @classmethod
    def _ntp_off(cls, value: object) -> object:
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "off", "none")):
            return None
        return value

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Build settings from ``PUNCTUAL_*`` variables, then apply ``overrides``.

        Raises
        ------
        SettingsError
            When a variable does not validate; the message names the variable.
        """
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for name in cls.model_fields:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is not None and (raw != "" or name in _EMPTY_MEANS_OFF):
                values[name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None or k in _EMPTY_MEANS_OFF})
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            names = ", ".join(ENV_PREFIX + str(e["loc"][0]).upper() for e in exc.errors() if e["loc"])
            raise SettingsError(f"invalid setting(s) {names}: {exc}") from exc
