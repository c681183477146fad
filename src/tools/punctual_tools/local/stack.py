"""The whole system on one machine: DynamoDB Local, the poller on its ticks, the fast path on the table's
stream, executors in worker processes.

``LocalStack`` is what ``punctual up`` runs and what the demo, the end-to-end tests and the benchmark start.
Its state file (``.punctual/stack.json``) lets other commands find a running stack (and each tenant's API
token: ``api_token_files``), and lets a restart clean up after a stack that was killed. It is written once the
stack is ready (``"ready": true``): the warm executors through their INIT, the poller's first tick done, the
fast path following the stream, the API (unless ``api=False``) listening; a state file a killed stack left is
removed as the next one starts. :func:`wait_ready` (``punctual status --wait``) waits for it. The file also
says how the stack polls (what a client needs to choose the fast path: :func:`client_settings`), under which
profile the executors run and whether their CPU quota took effect.

The executors run under ``LocalSettings.profile``: ``lambda`` (the default) applies the executor function's
configuration in ``template.yaml`` as Lambda does (see :mod:`punctual_tools.local.invoker`), the functions write
as in AWS (``write_batch`` "single") and their DynamoDB calls take as long as from Lambda
(:mod:`punctual_tools.local.store_latency`); ``local`` gives them whole cores and real-time firing.

The home is private: the stack makes it 0700 and what it keeps there 0600 (folders 0700), those of an earlier
run included (:func:`make_private`), and writes with a umask of 0o077 while it runs, which DynamoDB Local and the
executors' worker processes inherit.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import signal
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from punctual.config.clients import make_dynamodb_client
from punctual.config.settings import Settings
from punctual.domain.events import FastPathReport, PollReport
from punctual.domain.keys import next_tick
from punctual.domain.tenancy import is_tenant
from punctual.errors import SettingsError
from punctual.executing.priority import default_background_cpus, lower_current_thread, set_background_cpus
from punctual.polling.fastpath import dispatch_stream_records
from punctual.polling.poller import Poller
from punctual.runtime.wiring import decode_stream_image, poller_on
from punctual.stores.dlq import file_queue_url
from punctual.stores.dynamodb import DynamoStores, build_stores
from punctual_tools.console.figures import BATCH_LOG, BatchLog
from punctual_tools.iam import check_client, check_enabled
from punctual_tools.iam.live import ENABLE_VARIABLE as IAM_CHECK_VARIABLE
from punctual_tools.iam.live import iam_check
from punctual_tools.iam.policies import function_environment
from punctual_tools.local.api_server import LOCAL_TENANT, ApiResolverFactory, LocalApi, write_private, write_token
from punctual_tools.local.cpu_quota import remove_stale_groups
from punctual_tools.local.dynamodb_local import DynamoDBLocal, exposed_interfaces_warning, find_project_root
from punctual_tools.local.invoker import LocalInvoker
from punctual_tools.local.lambda_rules import (
    EXECUTOR_FUNCTION,
    TEMPLATE_FUNCTIONS,
    FunctionLimits,
    concurrency_cap,
    read_function_limits,
)
from punctual_tools.local.store_latency import store_latency_of, with_store_latency
from punctual_tools.local.stream import StreamReader
from punctual_tools.settings import LocalSettings
from punctual_tools.stats import summarize
from punctual_tools.template import ensure_table, load_template, stream_filter_patterns

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

log = logging.getLogger("punctual_tools.local")

PRIVATE_UMASK = 0o077
ENDPOINT_VARIABLES = r"AWS_ENDPOINT_URL(?:_[A-Z0-9_]+)?"  # boto3's: where its clients of AWS go
POLLER_FUNCTION = "PollerFunction"  # the template's functions the stack's process stands for (their roles)
FAST_PATH_FUNCTION = "FastPathFunction"
EXECUTOR_CONCURRENCY_VARIABLE = "PUNCTUAL_EXECUTOR_CONCURRENCY"  # Settings.executor_concurrency in the template
# What the stack keeps in its home (a folder's content included): what make_private fixes the mode of
STACK_FILES = (
    "dynamodb",
    "logs",
    "tokens",
    "api-token",
    "stack.json",
    "stack.json.tmp",
    "fires.jsonl",
    "dlq.jsonl",
    "dlq.jsonl.lock",
    "dlq.jsonl.tmp",
    BATCH_LOG,
    f"{BATCH_LOG}.tmp",
)


PREWARM_WAIT_S = 120.0  # how long the start waits for the warm executors' INIT


@dataclass
class StackConfig:
    """How to run the local stack. ``home`` holds the data, the logs, the fire log and the state file."""

    home: Path = field(default_factory=lambda: find_project_root() / ".punctual")
    port: int = 8765
    in_memory: bool = False
    poll_interval_s: float = 60.0
    settings_overrides: dict[str, Any] = field(default_factory=dict)
    max_concurrency: int = 64  # the machine's cap on executors at once (the template's reservation, if lower, wins)
    prewarm: int = 16  # warm executor processes, ready before the first batch (a cold start costs CPU)
    keep_warm: bool = True  # False: every executor invocation is a cold start (no environment is kept idle)
    duplicate_rate: float = 0.0
    fast_path: bool = True  # follow the table stream and dispatch short-lead tasks at once
    # How arms and records are written (Settings.write_batch); None: PUNCTUAL_WRITE_BATCH, else the profile's:
    # "single" under lambda, as in AWS; "transaction" under local (on DynamoDB Local a tenth of the CPU per item)
    write_batch: str | None = None
    api: bool = True  # serve the REST API on loopback (punctual_tools.local.api_server)
    api_port: int = 0  # 0: any free port (the state file says which)
    api_tokens: dict[str, str] = field(default_factory=dict)  # more bearer tokens, each for its tenant
    # Tenants served besides "local", each with a token written to <home>/tokens/<tenant> at each start
    tenants: tuple[str, ...] = ()
    api_workers: int = 3  # processes resolving API requests at once (0: in the stack's process, one at a time)
    # The executor's MemorySize (its CPU quota under the Lambda profile), as a deployment with
    # ExecutorMemorySize=<MB> runs it; None: template.yaml's
    executor_memory_mb: int | None = None

    def served_tenants(self) -> tuple[str, ...]:
        """``local`` and then ``tenants``, each once."""
        return tuple(dict.fromkeys((LOCAL_TENANT, *self.tenants)))


def local_tenant_map(tenants: tuple[str, ...], receiver_port: int) -> str:
    """The tenant map of a local stack given none: each served tenant may reach the loopback port of the demo's
    webhook receiver, and no other private address or port (not DynamoDB Local's, not the API's); the default
    quotas."""
    targets = [f"127.0.0.1:{receiver_port}"]
    return json.dumps({"tenants": {tenant: {"targets": targets} for tenant in tenants}})


def function_store(settings: Settings, function: str) -> DynamoStores:
    """The store's parts ``function`` (a logical id of the template) works through in the stack's process: a client of
    its own, which obeys the function's role when ``PUNCTUAL_IAM_CHECK=1`` and is as far from the store as the settings'
    ``store_latency`` says (the stack's own calls, such as creating the table, are no function's: neither judged
    nor delayed)."""
    client = check_client(make_dynamodb_client(settings), function, settings)
    return build_stores(settings, with_store_latency(client, settings))


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that gives a process (an executor worker) exactly these settings: every field of the
    model given, so a worker's ``LocalSettings.from_env`` reads the local-only ones and its handler's
    ``Settings.from_env`` the rest."""
    env = {f"PUNCTUAL_{name.upper()}": str(value) for name, value in settings.model_dump().items() if value is not None}
    if settings.ntp_server is None:
        env["PUNCTUAL_NTP_SERVER"] = "off"
    return env


def executor_env(settings: Settings, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the executors' worker processes: the settings (:func:`settings_env`), what Powertools
    and boto3 read, and ``PUNCTUAL_IAM_CHECK`` as ``environ`` (default: this process's) has it, so that with the
    check on the executors judge their calls against the executor's role. boto3's endpoint variables
    (``AWS_ENDPOINT_URL``, ``AWS_ENDPOINT_URL_<SERVICE>``) are passed on too: with ``AWS_ENDPOINT_URL_SQS`` set,
    the actions' SQS calls go to that endpoint (moto's server, say) instead of AWS."""
    environ = os.environ if environ is None else environ
    env = {
        **settings_env(settings),
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_SERVICE_NAME": "punctual",
        "POWERTOOLS_METRICS_NAMESPACE": "Punctual",
        "AWS_DEFAULT_REGION": settings.region,
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
    }
    if IAM_CHECK_VARIABLE in environ:
        env[IAM_CHECK_VARIABLE] = environ[IAM_CHECK_VARIABLE]
    env |= {name: value for name, value in environ.items() if re.fullmatch(ENDPOINT_VARIABLES, name)}
    return env


def read_state(home: Path) -> dict[str, Any] | None:
    """The state file in ``home`` as it is (a stack that was killed may have left it), or None."""
    try:
        state: dict[str, Any] = json.loads((home / "stack.json").read_text())
    except (OSError, ValueError):
        return None
    return state


READY_POLL_S = 0.05


def wait_ready(home: Path, timeout_s: float) -> dict[str, Any] | None:
    """The state of the stack that runs with its home at ``home`` once it is ready (its state file says so and
    its process runs), waiting up to ``timeout_s`` seconds for it; None if none is ready by then.

    Examples
    --------
    >>> state = wait_ready(Path(".punctual"), 120)  # doctest: +SKIP
    >>> client = Client(Settings.from_env(**client_settings(state)))  # doctest: +SKIP
    """
    deadline = time.monotonic() + timeout_s
    while True:
        state = read_state(home)
        if state and state.get("ready") and _alive(state.get("pid")):
            return state
        if time.monotonic() >= deadline:
            return None
        time.sleep(READY_POLL_S)


def client_settings(state: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a client of a running stack takes from its state file: where the table is, and how the stack
    polls (its poll interval and fast-path margin decide which tasks a write flags for the fast path; its lead covers
    them)."""
    names = ("endpoint_url", "table_name", "shard_count", "lead_ms", "poll_interval_ms", "fast_path_margin_ms")
    return {name: state[name] for name in names if name in state}


def make_private(home: Path) -> None:
    """Create ``home`` if need be and make it 0700, and what the stack keeps there (:data:`STACK_FILES`, with
    what their folders hold) readable by this user only: files 0600 (no bit beyond the owner's), folders 0700.
    Other entries of ``home`` are left alone (a ``--home`` given may hold more than the stack's), and so are
    symbolic links (a chmod would follow them out)."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    home.chmod(0o700)
    for name in STACK_FILES:
        top = home / name
        if top.is_symlink() or not top.exists():
            continue
        for path in [top, *top.rglob("*")] if top.is_dir() else [top]:
            with contextlib.suppress(FileNotFoundError):  # gone since it was listed
                if not path.is_symlink():
                    path.chmod(0o700 if path.is_dir() else path.stat().st_mode & 0o600)


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _is_ours(pid: int) -> bool:
    """Is ``pid`` still a DynamoDB Local or executor process (and not an unrelated one that reused the pid)?"""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False
    return b"DynamoDBLocal" in cmdline or b"multiprocessing" in cmdline or b"punctual" in cmdline


class LocalStack:
    """Start with :meth:`start`, stop with :meth:`stop` (or use it as a context manager)."""

    def __init__(
        self,
        config: StackConfig | None = None,
        on_poll: Callable[[PollReport], None] | None = None,
        on_batch: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.config = config or StackConfig()
        self._on_poll = on_poll
        self._on_batch = on_batch
        self._stop = threading.Event()
        self._first_tick = threading.Event()  # the poll loop's first tick is over (whatever its outcome)
        self._thread: threading.Thread | None = None
        self.ddb: DynamoDBLocal | None = None
        self.invoker: LocalInvoker | None = None
        self.poller: Poller | None = None
        self.settings: LocalSettings | None = None
        self.stream: StreamReader | None = None
        self.fast_poller: Poller | None = None
        self.api: LocalApi | None = None
        self._state_lock = threading.Lock()
        self._up = False  # every part started: the state file may be written
        self.limits: FunctionLimits | None = None  # the executor's, as the workers get them
        self._umask_before: int | None = None
        self.fast_path_reports: list[FastPathReport] = []
        self.fenced_at_start: list[str] = []  # executors of a killed stack fenced when this one started
        self.polls: list[PollReport] = []
        self._batch_log = BatchLog(self.config.home / BATCH_LOG)

    @property
    def fire_log(self) -> Path:
        return self.config.home / "fires.jsonl"

    @property
    def api_token_file(self) -> Path:
        """The local API's bearer token for the tenant ``local`` (a new one at each start; mode 0600)."""
        return self.config.home / "api-token"

    def api_token_path(self, tenant: str) -> Path:
        """Where a served tenant's bearer token is written: ``local``'s at :attr:`api_token_file`, another's
        at ``<home>/tokens/<tenant>``."""
        return self.api_token_file if tenant == LOCAL_TENANT else self.config.home / "tokens" / tenant

    @property
    def api_token_files(self) -> dict[str, Path]:
        """Each served tenant's token file (``StackConfig.served_tenants``)."""
        return {tenant: self.api_token_path(tenant) for tenant in self.config.served_tenants()}

    @property
    def batch_log(self) -> BatchLog:
        """The log of the batches the executors finished (the console's figures of the last hour)."""
        return self._batch_log

    @property
    def dead_letter_path(self) -> Path:
        """The local dead-letter queue (JSON lines): tasks whose last attempt failed (unless
        ``PUNCTUAL_DEAD_LETTER_QUEUE_URL`` or the settings overrides name another queue)."""
        return self.config.home / "dlq.jsonl"

    def _clean_stale(self) -> tuple[int, int] | None:
        """What a previous stack that was killed (SIGKILL) left: the CPU groups of its executors (of any stack
        no longer running, with what still runs in them) are removed; its workers still running (a busy one
        finishes its batch) are stopped; its DynamoDB Local, if it still serves this home's data directory, is
        returned (pid, port) for the new stack to keep (a restart then waits for no new store), else stopped
        too; and its state file is removed, so that nobody takes it for this stack's."""
        remove_stale_groups()
        state = read_state(self.config.home)
        if not state:
            return None
        if _alive(state.get("pid")) and state.get("pid") != os.getpid() and _is_ours(state["pid"]):
            raise RuntimeError(
                f"a local stack already runs (pid {state['pid']}, {state.get('endpoint_url')}); "
                "stop it first or use it (punctual demo finds it)"
            )
        store = state.get("dynamodb_pid")
        keep = self._keepable_store(store, state.get("endpoint_url"))
        for pid in [None if keep else store, *state.get("worker_pids", [])]:
            if _alive(pid) and _is_ours(pid):
                log.warning("stopping process %s left by a stack that did not stop cleanly", pid)
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        (self.config.home / "stack.json").unlink(missing_ok=True)
        time.sleep(0.2)
        return keep

    def _keepable_store(self, pid: int | None, endpoint_url: str | None) -> tuple[int, int] | None:
        """(pid, port) of a killed stack's DynamoDB Local that serves this home's data directory, else None."""
        if self.config.in_memory or not pid or not endpoint_url or not _alive(pid):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            port = int(endpoint_url.rsplit(":", 1)[1])
        except (OSError, ValueError):
            return None
        data_dir = str((self.config.home / "dynamodb").resolve()).encode()
        serves_here = b"-dbPath" in cmdline and cmdline[cmdline.index(b"-dbPath") + 1] == data_dir
        wanted_port = self.config.port in (0, port)
        return (pid, port) if b"DynamoDBLocal" in b" ".join(cmdline) and serves_here and wanted_port else None

    def start(self) -> LocalStack:
        """Start everything (with a umask of 0o077 until :meth:`stop`: every file written from now on in this
        process, and in the processes it starts, is private)."""
        bad = [tenant for tenant in self.config.tenants if not is_tenant(tenant)]
        if bad:
            raise ValueError(f"not tenant names: {bad} (lower-case letters, digits and '-', up to 40)")
        self._umask_before = os.umask(PRIVATE_UMASK)
        try:
            return self._start()
        except BaseException:
            self._restore_umask()
            raise

    def _restore_umask(self) -> None:
        if self._umask_before is not None:
            os.umask(self._umask_before)
            self._umask_before = None

    def _start(self) -> LocalStack:
        cfg = self.config
        stale_store = self._prepare_home()
        wanted = self._wanted_settings()
        # Background work (DynamoDB Local, polling, arming, recording) stays off one core, which firing keeps.
        background_cpus = wanted.background_cpus or default_background_cpus()
        set_background_cpus(background_cpus)
        endpoint = self._start_store(wanted, stale_store)
        self.settings = settings = LocalSettings.model_validate(
            {
                **wanted.model_dump(),
                "endpoint_url": endpoint,
                "background_cpus": background_cpus,
                "dead_letter_queue_url": wanted.dead_letter_queue_url or file_queue_url(self.dead_letter_path),
            }
        )
        client: DynamoDBClient = make_dynamodb_client(settings)
        created = ensure_table(client, settings.table_name)
        log.info("table %s %s at %s", settings.table_name, "created" if created else "found", endpoint)
        if not created:
            self._fence_the_dead(client, settings)
        worker_env = executor_env(settings)
        self.limits = limits = self._executor_limits(settings)
        self.settings = settings = self._tell_executors(settings, limits)
        invoker = self._start_invoker(settings, worker_env, limits)
        self._start_pollers(settings, invoker, endpoint)
        if check_enabled():  # the local invoker makes no boto3 call: their lambda:InvokeFunction, judged once
            for function in (POLLER_FUNCTION, *((FAST_PATH_FUNCTION,) if cfg.fast_path else ())):
                iam_check(function, settings).authorize_executor_invoke()
            log.info(
                "IAM check on: every AWS call of the executors, the API, the poller and the fast path is "
                "judged against its function's role in template.yaml"
            )
        # Polling starts before the API: after a restart, what the fenced executors held is due soonest.
        self._thread = threading.Thread(target=self._poll_loop, name="poller", daemon=True)
        self._thread.start()
        if cfg.api:
            self._start_api(settings, background_cpus)
        self._first_tick.wait()  # (a tick ends by its deadline) after a restart, what the dead held is dispatched
        self._up = True
        self._write_state()  # last: whoever finds it finds every part up
        return self

    def _prepare_home(self) -> tuple[int, int] | None:
        """The stack's private home with its logs and files, cleaned of a stack that did not stop cleanly: that
        stack's DynamoDB Local, if it may still serve this one (its pid and port)."""
        cfg = self.config
        make_private(cfg.home)
        (cfg.home / "logs").mkdir(mode=0o700, exist_ok=True)
        stale_store = self._clean_stale()
        for path in (self.fire_log, self.dead_letter_path, self.batch_log.path, cfg.home / "logs" / "executor.log"):
            path.touch(mode=0o600)  # created now: a process that appends to it later keeps this mode
        return stale_store

    def _wanted_settings(self) -> LocalSettings:
        """Every setting, checked before anything starts; without a tenant map, each served tenant may reach the
        demo's receiver only."""
        cfg = self.config
        overrides = {
            "poll_interval_ms": int(cfg.poll_interval_s * 1000),
            "fire_log_path": str(self.fire_log),
            "write_batch": cfg.write_batch,
            **cfg.settings_overrides,
        }
        wanted = LocalSettings.from_env(**overrides)
        if wanted.tenant_map_parameter:
            raise SettingsError(
                ["PUNCTUAL_TENANT_MAP_PARAMETER"],
                "the local runtime reads no Parameter Store: give the tenant map as PUNCTUAL_TENANT_MAP",
            )
        if not wanted.tenant_map.strip():
            wanted = LocalSettings.from_env(
                **overrides, tenant_map=local_tenant_map(cfg.served_tenants(), wanted.receiver_port)
            )
        return wanted

    def _start_store(self, wanted: LocalSettings, stale_store: tuple[int, int] | None) -> str:
        """DynamoDB Local's endpoint: the one a stack that did not stop cleanly left, if it answers, else a new
        one (which replaces it)."""
        cfg = self.config
        self.ddb = DynamoDBLocal(
            data_dir=None if cfg.in_memory else cfg.home / "dynamodb",
            port=cfg.port,
            in_memory=cfg.in_memory,
            log_path=cfg.home / "logs" / "dynamodb-local.log",
            java_opts=wanted.dynamodb_java_opts,
        )
        if stale_store is not None and self.ddb.adopt(*stale_store):
            log.warning(
                "kept DynamoDB Local (pid %d) from a stack that did not stop cleanly, with its data", stale_store[0]
            )
            endpoint = self.ddb.endpoint_url
        else:
            if stale_store is not None and _alive(stale_store[0]):  # it did not answer: a new one replaces it
                with contextlib.suppress(OSError):
                    os.kill(stale_store[0], signal.SIGKILL)
                time.sleep(0.2)
            endpoint = self.ddb.start()
        log.warning(exposed_interfaces_warning(self.ddb.port))
        return endpoint

    def _executor_limits(self, settings: LocalSettings) -> FunctionLimits:
        """The executors' limits: the template's, with the stack's memory and the settings' timeout if given."""
        limits = read_function_limits(EXECUTOR_FUNCTION)
        if self.config.executor_memory_mb is not None:
            limits = replace(limits, memory_mb=self.config.executor_memory_mb)
        if settings.local_timeout_s is not None:
            limits = replace(limits, timeout_s=settings.local_timeout_s)
        return limits

    def _tell_executors(self, settings: LocalSettings, limits: FunctionLimits) -> LocalSettings:
        """In Lambda's profile, the settings learn the executors' memory and concurrency, as the template tells
        the functions in AWS."""
        if settings.profile == "lambda" and settings.executor_memory_mb is None:
            # the executors' CPU, as the template tells the poller and the fast path in AWS: it sizes the batches
            settings = settings.model_copy(update={"executor_memory_mb": limits.memory_mb})
        if settings.profile == "lambda" and settings.executor_concurrency is None:
            # and how many executors may run at once, which bounds how finely a burst is cut for that CPU: what the
            # template tells the functions in AWS (the executors' reservation, or the share of the account's pool
            # they may take: UnreservedExecutorConcurrency), within what this machine runs at once
            told = function_environment(load_template(), EXECUTOR_FUNCTION)[EXECUTOR_CONCURRENCY_VARIABLE]
            concurrency = min(int(told), concurrency_cap(limits, self.config.max_concurrency))
            settings = settings.model_copy(update={"executor_concurrency": concurrency})
        return settings

    def _start_invoker(
        self, settings: LocalSettings, worker_env: dict[str, str], limits: FunctionLimits
    ) -> LocalInvoker:
        """The executors' invoker, its warm environments waited for through their INIT."""
        cfg = self.config
        self.invoker = invoker = LocalInvoker(  # kept at once: a stop stops its workers
            find_project_root() / "src" / "executor" / "app.py",
            worker_env,
            log_file=cfg.home / "logs" / "executor.log",
            limits=limits,
            profile=settings.profile,
            max_concurrency=cfg.max_concurrency,
            prewarm=cfg.prewarm,
            time_scale=settings.lambda_time_scale,
            duplicate_rate=cfg.duplicate_rate,
            on_result=self._batch_done,
            on_worker_started=self._worker_started,
            keep_warm=cfg.keep_warm,
        )
        if not invoker.wait_warm(PREWARM_WAIT_S):  # environments warm from earlier traffic: INIT done
            log.warning(
                "the %d warm executors are not all through their INIT after %.0f s", cfg.prewarm, PREWARM_WAIT_S
            )
        return invoker

    def _start_pollers(self, settings: LocalSettings, invoker: LocalInvoker, endpoint: str) -> None:
        """The poller, and with the fast path its own poller fed by the table's stream."""
        self.poller = poller_on(function_store(settings, POLLER_FUNCTION), invoker, settings)
        if not self.config.fast_path:
            return
        # Its own poller id, so that a batch's dispatcher tells which path dispatched it.
        self.fast_poller = poller_on(
            function_store(settings, FAST_PATH_FUNCTION),
            invoker,
            settings,
            poller_id=f"fast-{uuid.uuid4().hex[:12]}",
        )
        self.stream = StreamReader(
            endpoint, settings.region, settings.table_name, self._fast_path, stream_filter_patterns()
        )
        check_client(self.stream.streams_client, FAST_PATH_FUNCTION, settings)
        self.stream.start()

    def _start_api(self, settings: LocalSettings, background_cpus: str | None) -> None:
        """The REST API with each tenant's token written to its file; a port it cannot take stops the stack."""
        cfg = self.config
        tokens = self._write_tokens()
        try:
            self.api = LocalApi(
                ApiResolverFactory(settings),
                {**tokens, **cfg.api_tokens},
                cfg.api_port,
                workers=cfg.api_workers,
                background_cpus=background_cpus,
            ).start()
        except OSError as exc:
            self.stop()  # DynamoDB Local and the workers are up: nothing is left running
            raise RuntimeError(
                f"the REST API cannot listen on 127.0.0.1:{cfg.api_port} ({exc.strerror}): "
                "another stack may hold the port; give another with --api-port (0: any)"
            ) from exc
        for tenant, path in self.api_token_files.items():
            log.info("REST API at %s (tenant %r: the token in %s)", self.api.url, tenant, path)

    def _worker_started(self, _pid: int) -> None:
        if self._up:  # (before, the state file is written at the end of the start)
            self._write_state()

    def describe_limits(self) -> list[str]:
        """What the executors run with (the profile, the executor's limits and CPU quota, the local cap), and the
        other functions' limits, which the local runtime does not apply: they run in the stack's own process."""
        assert self.settings is not None
        assert self.invoker is not None
        assert self.limits is not None
        invoker = self.invoker
        firing = "real-time firing" if self.settings.firing_realtime else "firing at normal priority"
        lines = [
            f"profile {self.settings.profile}: "
            + (
                "each executor as Lambda runs it (its CPU share, killed at its timeout, frozen while idle, "
                "no real-time priority)"
                if self.settings.profile == "lambda"
                else f"whole cores and {firing}, no timeout, never frozen (more than Lambda gives)"
            ),
            self.limits.describe(self.config.max_concurrency),
            f"  bursts cut for {self.settings.executor_concurrency or 'any number of'} executors at once "
            f"({EXECUTOR_CONCURRENCY_VARIABLE})",
            f"  CPU quota: {'yes' if invoker.cpu_quota.applied else 'no'} ({invoker.cpu_quota.detail}); "
            f"{self.config.prewarm} warm at start",
            f"store latency (the functions' DynamoDB calls): {self.describe_store_latency()}",
        ]
        if self.settings.lambda_time_scale != 1:
            lines.append(f"  Lambda's async delays and event age x {self.settings.lambda_time_scale:g}")
        for function in TEMPLATE_FUNCTIONS:
            if function != EXECUTOR_FUNCTION:
                with contextlib.suppress(ValueError):
                    lines.append(f"{read_function_limits(function).describe()} (not applied: runs in the stack)")
        return lines

    def describe_store_latency(self) -> str:
        """The model the functions' DynamoDB calls are delayed by, in one line ("none": DynamoDB Local's own)."""
        assert self.settings is not None
        latency = store_latency_of(self.settings)
        return "none (DynamoDB Local's own, less than Lambda sees)" if latency is None else latency.describe()

    def _write_tokens(self) -> dict[str, str]:
        """A new token for each served tenant, written to its file (0600); a token file of a tenant not served
        now is removed. Returns token -> tenant."""
        folder = self.config.home / "tokens"
        folder.mkdir(mode=0o700, exist_ok=True)
        folder.chmod(0o700)
        tokens = {}
        for tenant, path in self.api_token_files.items():
            token = secrets.token_urlsafe(32)
            write_token(path, token)
            tokens[token] = tenant
        served = set(self.api_token_files.values())
        for stale in folder.glob("*"):
            if stale not in served and stale.is_file():
                stale.unlink()
        return tokens

    def _fence_the_dead(self, client: DynamoDBClient, settings: LocalSettings) -> None:
        """Every executor still alive by its heartbeat belongs to a stack that is gone (this home runs one stack,
        and a killed one's processes were stopped above): its death is known now, so it is fenced at once and
        its tasks are taken over by the first poll (which runs as the stack starts), instead of after its lease.
        Only tasks due between its last heartbeat and now are its crash window."""
        fenced = build_stores(settings, client).firing.fence_live_executors(int(time.time() * 1000))
        if fenced:
            log.warning(
                "fenced %d executor(s) of a stack that did not stop cleanly: their tasks are taken over "
                "by the first poll",
                len(fenced),
            )
        self.fenced_at_start = fenced

    def _write_state(self) -> None:
        """Write the state file (atomically; workers started on demand call this from their threads)."""
        assert self.ddb is not None
        assert self.settings is not None
        with self._state_lock:
            if self._up:  # not once stop() has begun: it removes the file
                self._write_state_locked()

    def _write_state_locked(self) -> None:
        assert self.ddb is not None
        assert self.settings is not None
        state = {
            "ready": True,  # (written at the end of the start only: see the module's docstring)
            "pid": os.getpid(),
            "endpoint_url": self.settings.endpoint_url,
            "table_name": self.settings.table_name,
            "shard_count": self.settings.shard_count,
            "lead_ms": self.settings.lead_ms,
            "poll_interval_ms": self.settings.poll_interval_ms,
            "fast_path_margin_ms": self.settings.fast_path_margin_ms,
            "fast_path": self.config.fast_path,
            "fire_log": str(self.fire_log),
            "batch_log": str(self.batch_log.path),
            "tenants": list(self.config.served_tenants()),
            "tenant_map": self.settings.tenant_map,  # the tenants' targets and quotas (no secret: ARNs and hosts)
            "dead_letter_queue_url": self.settings.dead_letter_queue_url,
            "allowed_targets": self.settings.allowed_targets,
            "receiver_port": self.settings.receiver_port,
            "dynamodb_pid": self.ddb.pid,
            "worker_pids": self.invoker.worker_pids() if self.invoker else [],
            "api_url": self.api.url if self.api else None,
            "api_token_file": str(self.api_token_file) if self.api else None,  # the tenant local's
            "api_token_files": {t: str(p) for t, p in self.api_token_files.items()} if self.api else {},
            "profile": self.settings.profile,
            "cpu_quota": self.invoker.cpu_quota.as_dict() if self.invoker else None,
            "executor_limits": asdict(self.limits) if self.limits else None,
            "lambda_time_scale": self.settings.lambda_time_scale,
            "write_batch": self.settings.write_batch,
            "store_latency": latency.as_dict() if (latency := store_latency_of(self.settings)) else None,
            # the executors' invocations so far (made again as each ends), and each cold start's wait for a core
            "invoker_stats": self.invoker.stats if self.invoker else None,
            "init_waits_ms": [round(ms, 1) for ms in self.invoker.init_waits_ms] if self.invoker else [],
        }
        tmp = self.config.home / "stack.json.tmp"
        write_private(tmp, json.dumps(state, indent=2))
        tmp.replace(self.config.home / "stack.json")

    def _batch_done(self, event: dict[str, Any], result: dict[str, Any]) -> None:
        self.batch_log.append(result, int(time.time() * 1000))
        self._write_state()  # the invoker's figures in the state file, as of this invocation's end
        if self._on_batch is not None:
            self._on_batch(result)
        else:
            drift = summarize(result.get("drift_ms") or [])
            figures = (
                f"drift p50 {drift['p50']:.3f} ms, max {drift['max']:.3f} ms" if drift["count"] else "nothing fired"
            )
            timeline = result.get("timeline_ms") or {}
            stages = ", ".join(f"{stage} {ms / 1000:.1f} s" for stage, ms in timeline.items())
            log.info(
                "batch %s: %s armed, %s fired, %s failed, %s missed; %s%s",
                str(event.get("batch_id"))[:8],
                result.get("armed"),
                result.get("fired"),
                result.get("failed"),
                result.get("missed"),
                figures,
                f" (after its start: {stages})" if stages else "",
            )

    def _fast_path(self, records: list[dict[str, Any]]) -> None:
        assert self.fast_poller is not None
        report = dispatch_stream_records(self.fast_poller, records, decode=decode_stream_image)
        self.fast_path_reports.append(report)
        log.info("fast path: %s", report.model_dump())

    def poll_now(self) -> list[PollReport]:
        """Run one tick at once (the loop keeps its own ticks): one poll per poll group, as in AWS
        (``Poller.poll_all_groups``), the other groups' polls in threads of their own."""
        assert self.poller is not None
        poller = self.poller
        now = int(time.time() * 1000)
        started: list[threading.Thread] = []
        reports: list[PollReport] = []

        def poll_group(group: int) -> None:
            try:
                reports.append(poller.poll(now, group=group))
            except Exception:  # as a failed group Lambda: the next tick finds its tasks
                log.exception("poll of group %d failed", group)

        def start_group(group: int) -> None:
            thread = threading.Thread(target=poll_group, args=(group,), name=f"poller-group-{group}", daemon=True)
            thread.start()
            started.append(thread)

        reports.extend(poller.poll_all_groups(now, start_group))
        for thread in started:
            thread.join()
        for report in sorted(reports, key=lambda r: r.group):
            self.polls.append(report)
            if self._on_poll is not None:
                self._on_poll(report)
        self._write_state()
        return reports

    def _poll_loop(self) -> None:
        assert self.settings is not None
        lower_current_thread()  # polling is background work: the executors' dispatchers come first
        interval = self.settings.poll_interval_ms
        while not self._stop.is_set():
            try:
                self.poll_now()
            except Exception as exc:  # a failed poll is retried at the next tick; nothing is lost
                if self._stop.is_set():  # the stack stopped under it (its join timed out): DynamoDB Local is gone
                    log.info("a poll still running when the stack stopped ended: %s", type(exc).__name__)
                else:
                    log.exception("poll failed")
            finally:
                self._first_tick.set()
            now = int(time.time() * 1000)
            self._stop.wait((next_tick(now, interval) - now) / 1000)

    def stop(self) -> None:
        """Stop polling, let executors hand back unfired tasks, stop DynamoDB Local, remove the state file."""
        self._stop.set()
        with self._state_lock:
            self._up = False
        if self.api is not None:
            self.api.stop()
        if self.stream is not None:
            self.stream.stop()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.invoker is not None:
            self.invoker.shutdown()
        if self.ddb is not None:
            self.ddb.stop()
        set_background_cpus(None)  # the confinement is process-wide: it ends with the stack
        with contextlib.suppress(OSError):
            state = read_state(self.config.home)
            if state and state.get("pid") == os.getpid():
                (self.config.home / "stack.json").unlink()
        self._restore_umask()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
