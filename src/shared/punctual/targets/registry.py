"""Action kinds as plugins: one :class:`ActionKind` carries a kind's model, its runner, its longest timeout and the
boto3 clients it needs; :mod:`punctual.targets.kinds` lists the kinds there are.

A runner is a plain function (it runs in the executor's worker thread: a quick AWS call) or a coroutine
function (it runs on the process's one event loop, :class:`FireLoop`: many requests in flight at once, none
holding a thread while it waits). Everything a runner uses from outside comes from its :class:`ActionEnv`
(the target rules, secrets, clients), built once per process from settings and injected in tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast, overload

from pydantic import JsonValue

from punctual.config.tenant_map import Quotas, TenantMap, TenantPolicy
from punctual.domain.model import Action
from punctual.domain.tenancy import is_tenant, split
from punctual.errors import ActionFailedError, InvalidRequestError
from punctual.network.policy import TargetPolicy
from punctual.targets.secrets import SecretResolver, SecretRules

if TYPE_CHECKING:
    from botocore.client import BaseClient
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_ssm import SSMClient

    from punctual.config.settings import Settings
    from punctual.config.tenant_source import TenantMapSource

A = TypeVar("A", bound=Action)
R = TypeVar("R")
log = logging.getLogger(__name__)
MAX_CACHED_TENANTS = 4096  # tenants whose rules are kept; past it the cache starts again


@dataclass(frozen=True, slots=True)
class FireContext:
    """What a runner knows about the fire it performs. ``latest_start_ms``: past this instant (due + grace) the
    occurrence may no longer start, so a runner's own retries stop before it. ``deadline_ms``: when the
    invocation running it ends (Lambda's timeout): a runner's retries must be over well before it."""

    task_id: str
    occurrence: int
    due_ms: int
    started_ms: float
    payload: JsonValue
    latest_start_ms: float | None = None
    deadline_ms: float | None = None

    @property
    def idempotency_key(self) -> str:
        return f"{self.task_id}:{self.occurrence}"


@dataclass(frozen=True, slots=True)
class TargetRules:
    """Where actions may go, as configured: URLs (:class:`~punctual.network.policy.TargetPolicy`, from
    ``PUNCTUAL_ALLOWED_TARGETS``), AWS target ARNs (``PUNCTUAL_ALLOWED_TARGET_ARNS``, exact ARNs) and which
    secrets a task may name. These are the deployment's rules, for tasks without a tenant; a tenant's task keeps
    to its tenant's (:meth:`of`), from the tenant map. The client checks a task against them when it is
    scheduled, the executor again when it fires."""

    urls: TargetPolicy = field(default_factory=TargetPolicy)
    arns: frozenset[str] = frozenset()
    secrets: SecretRules = field(default_factory=SecretRules)
    tenants: TenantMap = field(default_factory=TenantMap)
    tenant: str | None = None  # whose rules these are (None: the deployment's)
    quotas: Quotas | None = None  # the tenant's quotas (None: a task without a tenant has none)
    deployment: TargetRules | None = field(default=None, compare=False, repr=False)  # a tenant's: whose they narrow
    _by_tenant: dict[str, TargetRules] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings, tenants: TenantMap | None = None) -> TargetRules:
        """The deployment's rules, with ``tenants`` (None: the map of the ``tenant_map`` setting)."""
        return cls(
            urls=TargetPolicy.from_settings(settings.allowed_targets, settings.allow_plain_http),
            arns=frozenset(split_list(settings.allowed_target_arns)),
            tenants=TenantMap.parse(settings.tenant_map) if tenants is None else tenants,
        )

    def with_tenants(self, tenants: TenantMap) -> TargetRules:
        """The deployment's rules with another tenant map (each tenant's rules are derived again from it)."""
        base = self.deployment or self
        return TargetRules(urls=base.urls, arns=base.arns, secrets=base.secrets, tenants=tenants)

    def of(self, task_id: str) -> TargetRules:
        """The rules of the task ``task_id``: its tenant's (from the key, whatever the item says), or these for a
        task without one."""
        return self.for_tenant(split(task_id)[0])

    def for_tenant(self, tenant: str | None) -> TargetRules:
        """``tenant``'s rules: the hosts and ARNs of its entry in the tenant map (none without one), its own
        secret namespace (:meth:`SecretRules.for_tenant`) and its quotas. None: the deployment's rules."""
        if tenant == self.tenant:
            return self
        base = self.deployment or self
        if tenant is None:
            return base
        cache = base._by_tenant  # noqa: SLF001 - the deployment's own cache, an object of this class
        rules = cache.get(tenant)
        if rules is None:
            if len(cache) >= MAX_CACHED_TENANTS:
                cache.clear()
            rules = cache[tenant] = _tenant_rules(base, tenant)
        return rules

    def check_arn(self, arn: str, what: str, field_name: str) -> None:
        """Refuse an AWS target not on the ARN allowlist (InvalidRequestError naming ``field_name``)."""
        if arn not in self.arns:
            setting = (
                f"tenant {self.tenant}'s target_arns in the tenant map"
                if self.tenant is not None
                else "PUNCTUAL_ALLOWED_TARGET_ARNS"
            )
            raise InvalidRequestError(
                field_name,
                f"{what} {arn} is not an allowed target ({setting}; the executor's role may call only those)",
            )


def _tenant_rules(base: TargetRules, tenant: str) -> TargetRules:
    """A tenant's rules, narrowing the deployment's ``base``."""
    # A name no tenant map can hold gets nothing beyond public https, no ARN, no secret.
    policy = base.tenants.policy_of(tenant) if is_tenant(tenant) else TenantPolicy(quotas=base.tenants.quotas)
    return TargetRules(
        urls=TargetPolicy.from_settings(policy.targets, base.urls.allow_plain_http),
        arns=policy.target_arns,
        secrets=base.secrets.for_tenant(tenant),
        tenants=base.tenants,
        tenant=tenant,
        quotas=policy.quotas,
        deployment=base,
    )


def split_list(value: str | Iterable[str]) -> list[str]:
    """A comma-separated setting as a list of its non-empty, stripped entries."""
    parts = value.split(",") if isinstance(value, str) else list(value)
    return [p.strip() for p in parts if p.strip()]


class FireLoop:
    """One asyncio event loop in a daemon thread, for the life of the process: coroutine runners run here.
    The thread is started by whichever thread first needs it and inherits that thread's CPU priority: the
    executor starts it with its dispatcher, at the default priority."""

    def __init__(self, name: str = "fire-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._tasks: set[asyncio.Task[Any]] = set()  # warm-ups running (a task needs a reference to survive)
        self._lock = threading.Lock()
        self._queued: list[tuple[Awaitable[Any], Future[Any]]] = []  # submitted, not yet started on the loop
        self._closed = False
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(ready.set)
            self.loop.run_forever()

        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()
        ready.wait()

    def submit(self, coroutine: Awaitable[Any]) -> Future[Any]:
        """Run ``coroutine`` on the loop; the returned future completes with its result.

        Coroutines submitted together (a burst's fires, from many worker threads) wake the loop once: they are
        queued, and only the first of a run asks the loop to start them (one self-pipe write, one wake-up,
        where ``asyncio.run_coroutine_threadsafe`` costs each its own)."""
        if not asyncio.iscoroutine(coroutine):
            raise TypeError(f"a coroutine is required, not {type(coroutine).__name__}")
        future: Future[Any] = Future()
        with self._lock:
            if self._closed or not self._thread.is_alive():
                coroutine.close()
                raise RuntimeError("the fire loop is closed")
            self._queued.append((coroutine, future))
            wake = len(self._queued) == 1
        if wake:
            self.loop.call_soon_threadsafe(self._start_queued)
        return future

    def _start_queued(self) -> None:
        with self._lock:
            queued, self._queued = self._queued, []
        for coroutine, future in queued:
            if not future.set_running_or_notify_cancel():
                coroutine.close()  # type: ignore[attr-defined]
                continue
            try:
                task: asyncio.Task[Any] = self.loop.create_task(coroutine)  # type: ignore[arg-type]
            except BaseException as exc:  # noqa: BLE001 - this one fails; the others of the run still start
                future.set_exception(exc)
                continue
            task.add_done_callback(partial(_settle, future))

    def schedule(self, warmups: list[Warmup]) -> None:
        """Start each warm-up on the loop after its delay (from now); a failing one is logged."""

        def start(warmup: Warmup) -> None:
            task: asyncio.Task[Any] = self.loop.create_task(warmup.start())  # type: ignore[arg-type]
            self._tasks.add(task)
            task.add_done_callback(self._warmed)

        def plan() -> None:
            for warmup in warmups:
                self.loop.call_later(warmup.delay_s, start, warmup)

        with self._lock:
            if self._closed:
                return  # nothing is warmed for a loop that is closing
            self.loop.call_soon_threadsafe(plan)

    def _warmed(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("a warm-up failed: %r", task.exception())

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the loop, end its thread and free the loop's file descriptors. A coroutine submitted but not
        yet started fails (its caller is told, not left waiting)."""
        with self._lock:
            self._closed = True
            queued, self._queued = self._queued, []
        for coroutine, future in queued:
            coroutine.close()  # type: ignore[attr-defined]
            if future.set_running_or_notify_cancel():
                future.set_exception(RuntimeError("the fire loop closed before the coroutine started"))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self.loop.close()


def _settle(future: Future[Any], task: asyncio.Task[Any]) -> None:
    """Copy a finished task's outcome to the future :meth:`FireLoop.submit` returned."""
    if task.cancelled():
        future.set_exception(CancelledError("the fire loop stopped before the coroutine ended"))
        return
    exc = task.exception()
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(task.result())


class ActionEnv:
    """What runners may use, built once per process (:meth:`from_settings`) or by a test with its own parts.

    ``clients`` maps a boto3 service name to a client (tests hand in moto's); others are made on first use by
    ``client_factory``. ``resources`` holds per-process objects a kind keeps (its connection pool), made once
    by the factory a runner passes to :meth:`resource`. ``tenants``, when given, is where :meth:`refresh_tenants`
    takes the tenant map of :attr:`rules` from.
    """

    def __init__(  # noqa: PLR0913  every part keyword-only, each with a default a test may replace
        self,
        *,
        rules: TargetRules | None = None,
        secrets: SecretResolver | None = None,
        clients: dict[str, BaseClient] | None = None,
        client_factory: Callable[[str], BaseClient] | None = None,
        http_connections: int = 768,
        http_connections_per_host: int = 512,
        secrets_dir: str | None = None,
        secret_cache_s: float = 300.0,
        tenants: TenantMapSource | None = None,
    ) -> None:
        self.rules = rules or TargetRules()
        self._tenants = tenants
        self.http_connections = http_connections
        self.http_connections_per_host = http_connections_per_host
        self._clients = dict(clients or {})
        self._client_factory = client_factory
        self._resources: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._loop: FireLoop | None = None
        self.secrets = secrets or SecretResolver(
            rules=self.rules.secrets, secrets_dir=secrets_dir, client_factory=self.client, ttl_s=secret_cache_s
        )

    @classmethod
    def from_settings(
        cls, settings: Settings, clients: dict[str, BaseClient] | None = None, tenants: TenantMapSource | None = None
    ) -> ActionEnv:
        """The runners' environment for ``settings``; the tenant map comes from ``tenants`` (None: the
        ``tenant_map`` setting)."""
        from botocore.config import Config  # noqa: PLC0415  imported on first use: `import punctual` (which loads the action kinds) stays free of boto3

        from punctual.config.clients import aws_client  # noqa: PLC0415  imported on first use: `import punctual` (which loads the action kinds) stays free of boto3

        # A target call must end within its kind's max_timeout_s (30 s): 3 attempts of at most 2 + 8 s.
        config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=2, read_timeout=8)
        rules = TargetRules.from_settings(settings, None if tenants is None else tenants.tenant_map())
        return cls(
            tenants=tenants,
            rules=rules,
            clients=clients,
            client_factory=lambda service: aws_client(service, None, settings.region, config),
            http_connections=settings.http_connections,
            http_connections_per_host=settings.http_connections_per_host,
            secrets_dir=settings.secrets_dir,
            secret_cache_s=settings.secret_cache_s,
        )

    def refresh_tenants(self) -> None:
        """Take up the latest tenant map of the source (which reads it again once its copy is old): the executor
        calls this before it arms a batch, never on the way to a fire. A fire already started keeps the rules it
        looked up."""
        if self._tenants is None:
            return
        tenants = self._tenants.tenant_map()
        if tenants is not self.rules.tenants:
            self.rules = self.rules.with_tenants(tenants)

    @overload
    def client(self, service: Literal["lambda"]) -> LambdaClient: ...
    @overload
    def client(self, service: Literal["sqs"]) -> SQSClient: ...
    @overload
    def client(self, service: Literal["sns"]) -> SNSClient: ...
    @overload
    def client(self, service: Literal["events"]) -> EventBridgeClient: ...
    @overload
    def client(self, service: Literal["ssm"]) -> SSMClient: ...
    @overload
    def client(self, service: Literal["secretsmanager"]) -> SecretsManagerClient: ...
    @overload
    def client(self, service: str) -> BaseClient: ...
    def client(self, service: str) -> BaseClient:
        """The boto3 client of ``service`` (made once, on first use, unless one was handed in), typed by the
        service's stubs for the services the action kinds and secrets call."""
        with self._lock:
            client = self._clients.get(service)
            if client is None:
                if self._client_factory is None:
                    raise ActionFailedError(f"no {service} client configured")
                client = self._clients[service] = self._client_factory(service)
            return client

    def resource(self, name: str, make: Callable[[], R]) -> R:
        """A per-process object of a kind (``make()`` once, then the same one)."""
        with self._lock:
            if name not in self._resources:
                self._resources[name] = make()
            return cast(R, self._resources[name])

    @property
    def fire_loop(self) -> FireLoop:
        """The process's event loop for coroutine runners, started on first use."""
        with self._lock:
            if self._loop is None:
                self._loop = FireLoop()
            return self._loop

    def warm(self) -> None:
        """Start the event loop now (at a cold start), not at the first fire."""
        _ = self.fire_loop

    def close(self) -> None:
        """Close what the kinds hold (a resource's ``async close()`` runs on the loop), then stop the loop."""
        with self._lock:
            loop, self._loop = self._loop, None
            resources, self._resources = list(self._resources.values()), {}
        if loop is None:
            return
        for resource in resources:
            closing = getattr(resource, "close", None)
            if closing is not None and inspect.iscoroutinefunction(closing):
                with contextlib.suppress(Exception):
                    loop.submit(closing()).result(timeout=5)
        loop.close()


@dataclass(frozen=True, slots=True)
class Warmup:
    """Work a kind does ahead of its fires (opening connections): ``start()`` runs on the event loop
    ``delay_s`` seconds after the batch is prepared."""

    delay_s: float
    start: Callable[[], Awaitable[Any]]


Runner = Callable[[A, FireContext, ActionEnv], None] | Callable[[A, FireContext, ActionEnv], Awaitable[None]]
Check = Callable[[A, TargetRules], None]
Prepare = Callable[[list[tuple[A, float, str]], ActionEnv], list[Warmup]]


@dataclass(frozen=True)
class ActionKind(Generic[A]):
    """One action kind: its ``model`` (a pydantic :class:`~punctual.domain.model.Action` with a ``kind`` literal), its
    runner ``run`` (plain or ``async def``; raises :class:`~punctual.errors.ActionFailedError` to fail), the longest
    it may run (``max_timeout_s``: the executor's leases allow for it), the boto3 services it calls (``clients``,
    for the IAM it needs and for tests to inject), ``check``, the target rules applied when a task is scheduled
    (raises :class:`~punctual.errors.InvalidRequestError` naming the field; the runner applies them again when it
    fires), and
    ``prepare``, the warm-ups a batch's fires of this kind want (given ``(action, seconds until due, task id)``)."""

    model: type[A]
    run: Runner[A]
    max_timeout_s: float
    clients: tuple[str, ...] = ()
    check: Check[A] | None = None
    prepare: Prepare[A] | None = None

    @property
    def name(self) -> str:
        return str(self.model.model_fields["kind"].default)

    @functools.cached_property
    def is_async(self) -> bool:
        """Whether ``run`` is a coroutine function (asked at every fire: read once)."""
        return inspect.iscoroutinefunction(self.run)
