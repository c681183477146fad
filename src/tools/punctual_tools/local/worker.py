"""A local stand-in for one Lambda execution environment of the executor.

:func:`run_worker` imports the handler module once, then serves invocations one at a time, like Lambda: one
request in, one response out, over a pipe. stdout and stderr (the handler's logs and metrics) go to the log file.
SIGTERM asks the executor to stop: unfired tasks are released back to PENDING. It sends ``ready`` once the handler
module is loaded: the end of the cold start (Lambda's INIT).

Under the Lambda profile it runs in a fresh interpreter (:mod:`punctual_tools.local.environment`) that joined the
cgroup the invoker made for it before importing anything heavy: this module's imports and the handler module's
(boto3, pydantic, Powertools, Punctual) are the INIT, paid in full on INIT's CPU (see
:mod:`punctual_tools.local.cpu_quota`); its context reports the function's timeout and memory size
(:class:`WorkerSpec`). Under the local profile it runs in a process forked from a pre-loaded server
(``multiprocessing``'s forkserver, which has imported :data:`PRELOAD`): a cold start there costs one module load of
the handler, no CPU-second of imports competing with other executors' firing.

The worker reads its :class:`~punctual_tools.settings.LocalSettings` from the environment the stack gives it,
and sets up what is local-only before it loads the handler: the IAM check when ``PUNCTUAL_IAM_CHECK=1`` (every
boto3 call the handler makes is judged against the executor's role, :mod:`punctual_tools.iam`; the check's evaluator
is no part of Lambda's cold start: the time it takes is reported apart, ``tooling_ms``), CPU confinement for
the background threads the handler lowers, the fire log the log action appends to, and the store's latency
(:mod:`punctual_tools.local.store_latency`). The handler itself reads only ``Settings``.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from multiprocessing.connection import Connection
from types import ModuleType
from typing import Any

from punctual.executing.priority import set_background_cpus, set_realtime_firing
from punctual.runtime import metrics as metric_names
from punctual.targets import FireLog
from punctual_tools.iam import check_enabled, install_iam_check
from punctual_tools.local.cpu_quota import join
from punctual_tools.local.lambda_rules import EXECUTOR_FUNCTION
from punctual_tools.local.store_latency import install_store_latency
from punctual_tools.settings import LocalSettings

# What the forkserver (the local profile's) imports once, before forking workers.
PRELOAD = [
    "boto3",
    "botocore.session",
    "botocore.client",
    "pydantic",
    "ntplib",
    "json",
    "urllib.request",
    "aws_lambda_powertools",
    "aws_lambda_powertools.metrics",
    "aws_lambda_powertools.logging",
    "aws_lambda_powertools.utilities.typing",
    "punctual.runtime.wiring",
    "punctual.targets",
    "punctual.domain.events",
    "punctual_tools.settings",
    "punctual_tools.local.worker",
]


@dataclass(frozen=True)
class WorkerSpec:
    """What one execution environment is given: its function's timeout and memory size, and its cgroup."""

    timeout_s: float
    memory_mb: int
    cgroup: str | None = None  # the group to join at once (the CPU quota); None: no quota


class LocalContext:
    """The parts of Lambda's context object that the handlers and Powertools read."""

    def __init__(self, function_name: str, timeout_s: float, memory_mb: int, request_id: str | None = None) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:local:000000000000:function:{function_name}"
        self.memory_limit_in_mb = memory_mb
        self.aws_request_id = request_id or str(uuid.uuid4())  # the invoker's: kept across retries, as Lambda's
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def load_handler_module(path: str) -> ModuleType:
    """The handler module at ``path``, loaded afresh by path (its module-scope settings and clients built anew)."""
    spec = importlib.util.spec_from_file_location("punctual_local_handler", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load handler module from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_handler_in_a_thread(path: str | os.PathLike[str]) -> ModuleType:
    """:func:`load_handler_module` from a short-lived thread of its own, as a worker loads it: the executor's module
    lowers the CPU priority of the thread that loads it, which must not be the caller's. What loading raised is
    raised again in the caller's thread."""
    loaded: list[ModuleType | BaseException] = []

    def load() -> None:
        try:
            loaded.append(load_handler_module(os.fspath(path)))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            loaded.append(exc)

    thread = threading.Thread(target=load, name="cold-start")
    thread.start()
    thread.join()
    (module,) = loaded
    if isinstance(module, BaseException):
        raise module
    return module


def lambda_environment(table_name: str, *, region: str, shard_count: int = 1) -> dict[str, str]:
    """What Lambda's environment gives a handler loaded in this process (the template's variables at their
    defaults, for ``table_name``): dummy credentials for moto, no NTP probe, no tracing."""
    return {
        "AWS_DEFAULT_REGION": region,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "PUNCTUAL_TABLE_NAME": table_name,
        "PUNCTUAL_SHARD_COUNT": str(shard_count),
        "PUNCTUAL_REGION": region,
        "PUNCTUAL_NTP_SERVER": "off",
        "PUNCTUAL_EXECUTOR_FUNCTION": "punctual-executor",
        "POWERTOOLS_SERVICE_NAME": metric_names.SERVICE,
        "POWERTOOLS_METRICS_NAMESPACE": metric_names.NAMESPACE,
        "POWERTOOLS_TRACE_DISABLED": "true",
    }


def _join_quota(cgroup: str | None) -> str | None:
    """Join ``cgroup`` (the function's CPU quota), if any; why it could not be joined, or None."""
    if not cgroup:
        return None
    try:
        join(cgroup)
    except OSError as exc:
        return f"cannot join {cgroup}: {exc.strerror or exc}"
    return None


def _write_output_to(log_path: str) -> None:
    """stdout and stderr (the handler's logs and metrics) appended to ``log_path`` from now on."""
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _invoke(
    module: ModuleType, payload: Any, function_name: str, spec: WorkerSpec, request_id: str | None
) -> dict[str, Any]:
    """One invocation of the handler, as the answer the invoker gets: its result, or the error it raised."""
    try:
        context = LocalContext(function_name, spec.timeout_s, spec.memory_mb, request_id)
        return {"ok": True, "result": module.handler(payload, context)}
    except Exception as exc:  # noqa: BLE001 - reported to the invoker, which retries like Lambda
        traceback.print_exc()
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def run_worker(
    handler_path: str, conn: Connection, log_path: str | None, env: dict[str, str], spec: WorkerSpec
) -> None:
    """Serve invocations on ``conn`` until it closes, a ``None`` arrives, or SIGTERM stopped a batch."""
    tooling_started = time.monotonic()
    if check_enabled(env):  # PUNCTUAL_IAM_CHECK=1: every client the handler builds obeys the executor's role.
        # Tooling, not Lambda's: its node run is kept off the function's CPU quota, joined next (a fresh
        # environment joined its group before: then the invoker takes the time it took off the INIT it records).
        install_iam_check(EXECUTOR_FUNCTION, LocalSettings.from_env(env), force=True)
    tooling_ms = (time.monotonic() - tooling_started) * 1000
    cgroup_error = _join_quota(spec.cgroup)  # first: the cold start runs on the function's CPU too
    if log_path:
        _write_output_to(log_path)
    os.environ.update(env)
    # What Lambda's runtime tells every environment of its function: the handler reads its CPU share from it, as
    # in AWS (a cgroup's quota, read during the INIT, would be the INIT's CPU, not the memory size's share).
    os.environ["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] = str(spec.memory_mb)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the runtime, which stops us with SIGTERM
    settings = LocalSettings.from_env()
    set_background_cpus(settings.background_cpus)  # before the handler starts and lowers its threads
    set_realtime_firing(settings.firing_realtime)  # ... and before its dispatcher starts its firing threads
    FireLog.configure(settings.fire_log_path)
    install_store_latency(settings)  # every DynamoDB client the handler builds is as far away as from Lambda
    module = load_handler_module(handler_path)
    stopping = threading.Event()

    def on_term(signum: int, frame: Any) -> None:
        stopping.set()
        stop = getattr(getattr(module, "executor", None), "request_stop", None)
        if stop is not None:
            threading.Thread(target=stop, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    conn.send({"ready": True, "pid": os.getpid(), "cgroup_error": cgroup_error, "tooling_ms": tooling_ms})
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        payload, request_id = message if isinstance(message, tuple) else (message, None)
        response = _invoke(module, payload, settings.executor_function, spec, request_id)
        try:
            conn.send(response)
        except OSError:  # the invoker is gone (the stack died): nobody is left to answer
            return
        if stopping.is_set():
            return
