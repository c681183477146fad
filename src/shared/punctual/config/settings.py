"""One validated settings object, read once from the environment by the adapters (handlers, CLI).

Services never read ``os.environ``: they receive a :class:`Settings` instance. :class:`Settings` holds what
the Lambdas and the client need; the local runtime's own settings (CPU confinement, fire log, DynamoDB Local)
extend it in ``punctual_tools.settings.LocalSettings``, outside what the Lambda layer holds.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Literal, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from punctual.config.cpu_share import fires_per_period
from punctual.config.tenant_map import TenantMap
from punctual.errors import SettingsError
from punctual.network.policy import TargetPolicy, check_target_arn

ENV_PREFIX = "PUNCTUAL_"


_EMPTY_MEANS_OFF = frozenset({"ntp_server"})  # an explicit None / "" / "off" switches the feature off

# Parameter Store's rules for a name: these characters, at most 1,011 of them, 15 levels, no aws / ssm prefix
_PARAMETER_NAME = re.compile(r"[A-Za-z0-9_.\-/]{1,1011}")
MAX_PARAMETER_LEVELS = 15  # the deepest hierarchy Parameter Store allows a name
_RESERVED_PREFIX = re.compile(r"^/?(aws|ssm)", re.IGNORECASE)
# A tenant's task may name SSM secrets under /punctual/tenants/<tenant>/ (SecretRules.for_tenant)
_TENANT_SECRETS = "/punctual/tenants/"


def check_parameter_name(value: str) -> str:
    """``value`` if it is a Parameter Store name, or a path of one ending in ``/``; ValueError saying why not.

    A name holding a ``/`` is a hierarchy and starts with one; no level is empty. A name under
    ``/punctual/tenants/`` is refused: tenants' tasks may read secrets there, and the map names every tenant.
    """
    if not _PARAMETER_NAME.fullmatch(value):
        raise ValueError(
            f"{value[:100]!r} is not a Parameter Store name (letters, digits and _.-/, at most 1011 characters)"
        )
    name = value.removesuffix("/") if value.startswith("/") else value
    levels = name.removeprefix("/").split("/")
    if "/" in value and not value.startswith("/"):
        raise ValueError(f"{value!r}: a name in a hierarchy starts with '/'")
    if "" in levels or len(levels) > MAX_PARAMETER_LEVELS:
        raise ValueError(f"{value!r}: a hierarchy has 1 to 15 levels, none empty")
    if _RESERVED_PREFIX.match(value):
        raise ValueError(f"{value!r}: a parameter name cannot start with aws or ssm")
    if (name + "/").startswith(_TENANT_SECRETS):
        raise ValueError(f"{value!r}: under {_TENANT_SECRETS}, where tenants' tasks may read secrets")
    return value


def least_lead_ms(poll_interval_ms: int, fast_path_margin_ms: int) -> int:
    """The shortest lead a poll cycle allows: a task is dispatched at most a poll interval after it comes within the
    lead, and must be the fast path's margin before it is due (what :class:`Settings` checks, and what
    ``punctual plan`` holds a lever to)."""
    return poll_interval_ms + fast_path_margin_ms


class Settings(BaseModel):
    """Everything the poller, the fast path, the executor and the client can be tuned with.

    Each field can be set from the environment as ``PUNCTUAL_<FIELD NAME IN UPPER CASE>`` (see
    :meth:`from_env`); a subclass adds fields the same way.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    table_name: str = Field("punctual-tasks", min_length=3, max_length=255)
    region: str = "us-east-1"
    endpoint_url: str | None = Field(None, description="DynamoDB endpoint; None means AWS itself")
    shard_count: int = Field(4, ge=1, le=256, description="shards per minute bucket in the due index")
    poll_groups: int = Field(
        1,
        ge=1,
        le=64,
        description="pollers a tick fans out to, each reading its own equal range of shards (a "
        "divisor of shard_count; see docs/scale.md, section 5)",
    )
    lead_ms: int = Field(90_000, ge=5_000, le=600_000, description="how far ahead of now the poller dispatches")
    poll_interval_ms: int = Field(60_000, ge=1_000, le=600_000)
    fast_path_margin_ms: int = Field(
        10_000,
        ge=0,
        le=600_000,
        description="a task written due sooner than poll interval + this goes to the stream fast path",
    )
    executor_lease_ms: int = Field(
        20_000,
        ge=5_000,
        le=600_000,
        description="an executor holding armed tasks is alive until its last heartbeat + this; past it (+ a poll) "
        "its unfired tasks are taken over",
    )
    heartbeat_interval_ms: int = Field(5_000, ge=500, le=120_000, description="how often an executor renews it")
    arm_margin_ms: int = Field(30_000, ge=1_000, description="armed lease beyond due + grace + action timeout")
    overdue_safety_ms: int = Field(
        180_000, ge=60_000, description="the poller never moves its watermark closer to now than this"
    )
    max_batch_size: int = Field(
        250,
        ge=1,
        le=5_000,
        description="the most tasks the poller and the fast path put into one executor's batch (fewer when the "
        "executor's CPU cannot fire them: executor_memory_mb); in AWS at most 900, so that a batch of the longest "
        "ids fits an asynchronous invocation (the template's ExecutorBatchSize)",
    )
    executor_memory_mb: int | None = Field(
        None,
        ge=128,
        le=10_240,
        description="the executor function's MemorySize (its CPU: MB / 1769 of a core); the poller and the fast path "
        "put no more tasks due within one CPU-quota period (100 ms) into a batch than that CPU can fire in it "
        "(fire_cpu_us). None: no such limit (whole cores)",
    )
    fire_cpu_us: float = Field(
        60.0,
        gt=0,
        le=100_000,
        description="the CPU one fire takes an executor (the dispatcher's hand-off, the action's start, the "
        "outcome handed on), which sizes a batch of tasks due together (executor_memory_mb)",
    )
    executor_concurrency: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="how many executors may run at once (the executor's reserved concurrency, or the account's pool): "
        "the cut of a burst by the executors' CPU (executor_memory_mb) never takes more than half of it a poll "
        "group. None: no such bound",
    )
    redispatch_after_ms: int | None = Field(
        None,
        ge=0,
        le=3_600_000,
        description="a poller does not send again a task still PENDING that it sent less than this ago (its executor "
        "may still be arming it), unless the task is due before the next poll could send it and was sent a poll "
        "interval (less the fast-path margin) ago; past it, the task is sent again (its invocation was throttled, "
        "dropped or failed). At least a lead (lead_ms, the default), so that a tick that comes early does not send "
        "again what the last one sent; 0: always send (the poller remembers nothing, and counts no task as not armed)",
    )
    default_misfire_grace_ms: int = Field(60_000, ge=0, le=86_400_000)
    max_horizon_days: int = Field(366, ge=1, le=3_660)
    max_payload_bytes: int = Field(256 * 1024, ge=1, le=350 * 1024)
    ntp_server: str | None = Field("time.aws.com", description='"host[:port]"; "off" (or empty) disables NTP')
    ntp_timeout_s: float = Field(0.5, gt=0, le=5)
    executor_function: str = "punctual-executor"
    worker_threads: int = Field(32, ge=1, le=512, description="action worker threads per executor")
    db_threads: int = Field(8, ge=1, le=64, description="threads for index reads and arm / record writes")
    write_batch: Literal["single", "transaction"] = Field(
        "single",
        description="many arms / records as single UpdateItems in parallel (AWS: 1 write unit each) or "
        "as TransactWriteItems of up to 100 (2 units each, but ~10x less CPU per item: the local runtime's choice)",
    )
    retention_days: int = Field(
        30, ge=1, le=3_650, description="finished tasks carry expires_at = finished + this; DynamoDB TTL deletes them"
    )
    dead_letter_queue_url: str | None = Field(
        None,
        description="where tasks that exhaust their retries go: an SQS queue URL (https://...), or locally a "
        "JSON-lines file (file:///path/dlq.jsonl)",
    )
    allowed_targets: str = Field(
        "",
        description="hosts and CIDRs (comma-separated) that http actions may reach although they are not public "
        'addresses, e.g. "127.0.0.1" for a loopback receiver; plain http is allowed to them too',
    )
    allow_plain_http: bool = Field(False, description="http:// targets allowed anywhere (default: https only)")
    allowed_target_arns: str = Field(
        "",
        description="exact ARNs (comma-separated) of the Lambda functions, SQS queues, SNS topics and "
        "EventBridge buses tasks may target; the executor's role is granted exactly these",
    )
    secrets_dir: str | None = Field(None, description="where file: secret references are read (locally)")
    secret_cache_s: float = Field(300.0, ge=0, le=86_400, description="how long an executor keeps a resolved secret")
    http_connections: int = Field(
        768,
        ge=1,
        le=10_000,
        description="webhook connections an executor holds at most (Lambda allows 1,024 open files a process)",
    )
    http_connections_per_host: int = Field(512, ge=1, le=10_000, description="... of them to one host")
    tenant_map: str = Field(
        "",
        description="the API's tenants: a JSON object of IAM role (or user) ARN to tenant name, e.g. "
        '{"arn:aws:iam::123456789012:role/AcmeScheduler": "acme"}; a caller not in it is refused',
    )
    tenant_map_parameter: str | None = Field(
        None,
        description="the tenant map in Parameter Store instead (not both): the name of a String or SecureString "
        "parameter holding it (/punctual-config/tenant-map), or a path ending in '/' whose parameters each hold a "
        "part of it, a map in either form (one parameter holds at most 8 KB). Read at a cold start, and again once "
        "older than tenant_map_cache_s",
    )
    tenant_map_cache_s: float = Field(
        60.0,
        ge=1,
        le=3_600,
        description="how long the API and the executor use the tenant map read from tenant_map_parameter before "
        "they read it again (a failed read keeps the map read before)",
    )
    api_url: str | None = Field(
        None,
        description="the client and CLI go through the API at this URL instead of writing the table "
        "(AWS: SigV4-signed with the caller's credentials; locally: the token of api_token)",
    )
    api_token: str | None = Field(None, description="the local API's bearer token (punctual up writes one)")
    switch_interval_s: float = Field(
        0.001,
        gt=0,
        le=0.1,
        description="the executor's GIL switch interval (sys.setswitchinterval): short, so "
        "that the dispatcher gets the interpreter back soon after its sleep",
    )

    @property
    def schedule_ahead_ms(self) -> int:
        """How far beyond a poll's window a recurring schedule's occurrences are made (a poll interval and the
        fast-path margin: the poll before the one that dispatches an occurrence has already made it)."""
        return self.poll_interval_ms + self.fast_path_margin_ms

    @property
    def max_fires_at_once(self) -> int | None:
        """The most tasks due within one CPU-quota period that a batch holds (None: no limit; see
        ``executor_memory_mb``)."""
        if self.executor_memory_mb is None:
            return None
        return fires_per_period(self.executor_memory_mb, self.fire_cpu_us)

    @property
    def quota_cut_max_batches(self) -> int | None:
        """The most batches one dispatch may make by cutting bursts for the executors' CPU: half the executors
        that may run at once, shared by the poll groups (the other half serves the batches still in flight from
        the dispatch before and the fast path). None: no bound."""
        if self.executor_concurrency is None:
            return None
        return max(1, self.executor_concurrency // (2 * self.poll_groups))

    @property
    def redispatch_hold_back_ms(self) -> int:
        """How long a poller holds back a task it sent that is still PENDING (``redispatch_after_ms``, by default
        a lead)."""
        return self.lead_ms if self.redispatch_after_ms is None else self.redispatch_after_ms

    @model_validator(mode="after")
    def _hold_back_a_lead(self) -> Self:
        if self.redispatch_after_ms and self.redispatch_after_ms < self.lead_ms:
            raise ValueError(
                f"redispatch_after_ms ({self.redispatch_after_ms}) must be 0 or at least lead_ms ({self.lead_ms})"
            )
        return self

    @model_validator(mode="after")
    def _lead_covers_a_poll_interval(self) -> Self:
        # A task not flagged for the fast path is due at least poll interval + margin after it was written; the first
        # poll that reaches it comes at most a poll interval after it is due - lead. It is dispatched the fast-path
        # margin (the time a poll needs to dispatch it) before it is due only if lead >= interval + margin.
        if self.lead_ms < least_lead_ms(self.poll_interval_ms, self.fast_path_margin_ms):
            raise PydanticCustomError(  # its context's "fields": from_env names their variables
                "value_error",
                f"lead_ms ({self.lead_ms}) must be at least poll_interval_ms ({self.poll_interval_ms}) + "
                f"fast_path_margin_ms ({self.fast_path_margin_ms}): a poll dispatches a task at most a poll interval "
                "after it comes within the lead, and must do so the margin before it is due",
                {"fields": ("lead_ms", "poll_interval_ms", "fast_path_margin_ms")},
            )
        return self

    @model_validator(mode="after")
    def _groups_divide_shards(self) -> Self:
        if self.shard_count % self.poll_groups:
            raise PydanticCustomError(  # its context's "fields": from_env names their variables
                "value_error",
                f"poll_groups ({self.poll_groups}) must divide shard_count ({self.shard_count}): each group reads an "
                "equal range of shards",
                {"fields": ("poll_groups", "shard_count")},
            )
        return self

    @field_validator("allowed_targets")
    @classmethod
    def _target_list(cls, value: str) -> str:
        TargetPolicy.from_settings(value)  # a bad entry is a ValueError naming it
        return value

    @field_validator("tenant_map")
    @classmethod
    def _tenant_map(cls, value: str) -> str:
        TenantMap.parse(value)
        return value

    @field_validator("tenant_map_parameter")
    @classmethod
    def _parameter_name(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return check_parameter_name(value.strip())

    @model_validator(mode="after")
    def _one_tenant_map(self) -> Self:
        if self.tenant_map.strip() and self.tenant_map_parameter:
            raise PydanticCustomError(  # its context's "fields": from_env names their variables
                "value_error",
                f"{ENV_PREFIX}TENANT_MAP and {ENV_PREFIX}TENANT_MAP_PARAMETER are both set: give the tenant map in "
                "one of them",
                {"fields": ("tenant_map", "tenant_map_parameter")},
            )
        return self

    @field_validator("allowed_target_arns")
    @classmethod
    def _arn_list(cls, value: str) -> str:
        for arn in (part.strip() for part in value.split(",")):
            if arn:
                check_target_arn(arn)
        return value

    @field_validator("dead_letter_queue_url")
    @classmethod
    def _queue_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        url = urlsplit(value.strip())
        if url.scheme in ("https", "http") and url.netloc:
            return value.strip()
        if url.scheme == "file" and url.netloc in ("", "localhost") and url.path.startswith("/"):
            return value.strip()
        raise ValueError(f"{value!r} is neither an SQS queue URL (https://...) nor a file URL (file:///path)")

    @field_validator("ntp_server", mode="before")
    @classmethod
    def _ntp_off(cls, value: object) -> object:
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "off", "none")):
            return None
        return value

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Self:
        """Build settings from ``PUNCTUAL_*`` variables (``os.environ`` unless ``env`` is given), then apply
        ``overrides``. Only this class's fields are read: a subclass reads its own as well.

        Parameters
        ----------
        env
            The variables to read; ``None`` means ``os.environ``. An empty value means the default (for
            ``ntp_server``: no NTP).
        **overrides
            Field values that win over the environment; ``None`` is ignored (except for ``ntp_server``).

        Returns
        -------
        Self
            The validated, frozen settings.

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
            fields = [str(e["loc"][0]) for e in exc.errors() if e["loc"]]
            fields += [f for e in exc.errors() for f in (e.get("ctx") or {}).get("fields", ())]  # a check across fields
            raise SettingsError([ENV_PREFIX + f.upper() for f in dict.fromkeys(fields)], str(exc)) from exc
