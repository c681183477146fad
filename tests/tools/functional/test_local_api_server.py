"""The local REST API server on loopback: a request is authenticated before its body is read, a slow caller is
cut off, a flood of slow or silent connections neither holds a slot nor delays a caller, a refusal waits for no
other, a slow request does not hold the others, each tenant's token names it, and the stack's home is private."""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import stat
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import urllib3
from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from punctual.errors import PunctualError
from punctual_tools.cli.common import api_token
from punctual_tools.local.api_server import HEADER_TIMEOUT_S, LOCAL_TENANT, LocalApi
from punctual_tools.local.stack import LocalStack, StackConfig, make_private

TOKENS = {"tok-acme": "acme"}
WAIT_S = 60.0  # a bound for what should take milliseconds: a loaded machine must not fail the test


class Echo:
    """A resolver that answers what it was given: the tenant, the path and the body. It pickles (a class)."""

    calls = 0

    def __call__(self) -> Echo:
        return self

    def resolve(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        Echo.calls += 1
        authorizer = event["requestContext"]["authorizer"] or {}
        return {
            "statusCode": 200,
            "headers": {"Content-Type": "application/json"},
            "body": json.dumps({"tenant": authorizer.get("tenant"), "path": event["path"], "body": event["body"]}),
        }


class HoldingApi:
    """Builds (in a worker process) a Powertools resolver whose ``GET /hold`` waits, once it has said so in
    ``<folder>/entered``, until ``<folder>/release`` exists, and whose ``POST /echo`` answers its own body."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __call__(self) -> APIGatewayRestResolver:
        app = APIGatewayRestResolver()
        folder = Path(self.folder)

        @app.get("/hold")
        def hold() -> dict[str, Any]:
            (folder / "entered").touch()
            deadline = time.monotonic() + WAIT_S
            while not (folder / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            return {"held": True}

        @app.post("/echo")
        def echo() -> dict[str, Any]:
            body = app.current_event.json_body  # read, then a pause: time for another request to overwrite it
            time.sleep(0.02)
            return {"body": body, "again": app.current_event.json_body}

        return app


@pytest.fixture
def echo_api() -> Iterator[LocalApi]:
    with LocalApi(Echo(), {"tok-acme": "acme"}, timeout_s=WAIT_S) as server:
        yield server


def connect(api: LocalApi) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", int(api.url.rsplit(":", 1)[1])), timeout=WAIT_S)
    return sock


def read_to_end(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (``WAIT_S`` at most)."""
    received = b""
    while data := sock.recv(65536):
        received += data
    return received


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def get(api: LocalApi, path: str, token: str = "tok-acme") -> urllib3.BaseHTTPResponse:
    return urllib3.request(
        "GET", api.url + path, headers={"Authorization": f"Bearer {token}"}, retries=False, timeout=WAIT_S
    )


# -- refused on the headers ------------------------------------------------------------------------------------
def test_an_unauthenticated_request_is_refused_before_its_body_arrives(echo_api: LocalApi) -> None:
    # Given a request with no token that announces a body and sends none of it
    Echo.calls = 0
    with connect(echo_api) as sock:
        sock.sendall(b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
        # When the server answers  Then it is a 401 problem, without waiting for the body (waiting would have
        # ended, WAIT_S later, in a closed connection and no answer), and the connection is closed after it
        answer = read_to_end(sock)
    assert status_of(answer) == 401
    assert b"Connection: close" in answer
    assert b"application/problem+json" in answer
    assert Echo.calls == 0


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        (b"Content-Length: 2000000\r\n", 413),
        (b"Content-Length: -5\r\n", 400),
        (b"Content-Length: 1_0\r\n", 400),
        (b"Content-Length: 2\r\nContent-Length: 2\r\n", 400),
        (b"Content-Length: 2\r\ncontent-length: 3\r\n", 400),
        (b"Transfer-Encoding: chunked\r\n", 411),
        (b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n", 411),
    ],
    ids=["too-large", "negative", "underscore", "two-equal", "two-unequal", "chunked", "length-and-chunked"],
)
def test_a_body_the_server_will_not_read_is_refused_at_once_and_the_connection_closed(
    echo_api: LocalApi, headers: bytes, status: int
) -> None:
    with connect(echo_api) as sock:
        sock.sendall(b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-acme\r\n" + headers + b"\r\n")
        answer = read_to_end(sock)
    assert status_of(answer) == status
    assert b"Connection: close" in answer


def test_a_refused_request_whose_body_was_sent_gets_its_answer(echo_api: LocalApi) -> None:
    # Given a wrong token on a request whose body is sent whole: the server answers without reading it
    body = b"x" * 200_000
    response = urllib3.request(
        "POST",
        echo_api.url + "/v1/tasks",
        body=body,
        retries=False,
        timeout=WAIT_S,
        headers={"Authorization": "Bearer wrong"},
    )
    # Then the caller still reads its 401 (the unread body did not reset the connection under it)
    assert response.status == 401


def test_a_caller_that_asks_before_sending_its_body_is_refused_or_told_to_go_on(echo_api: LocalApi) -> None:
    head = b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n"
    # Given a caller without a token that asks whether to send its body  Then it is refused, not told to go on
    with connect(echo_api) as sock:
        sock.sendall(head + b"\r\n")
        refused = read_to_end(sock)
    assert status_of(refused) == 401
    assert b"100 Continue" not in refused
    # And a caller with one is told to go on, and answered from its body
    with connect(echo_api) as sock:
        sock.sendall(head + b"Authorization: Bearer tok-acme\r\n\r\n")
        assert sock.recv(1024).startswith(b"HTTP/1.1 100")
        sock.sendall(b"{}")
        sock.shutdown(socket.SHUT_WR)  # no other request: the server closes after its answer
        answer = read_to_end(sock)
    assert status_of(answer) == 200
    assert answer.endswith(b'"body": "{}"}')


def test_a_port_in_use_is_an_os_error(echo_api: LocalApi) -> None:
    with pytest.raises(OSError, match="in use"):
        LocalApi(Echo(), TOKENS, int(echo_api.url.rsplit(":", 1)[1]))


# -- slow callers -------------------------------------------------------------------------------------------
def test_a_caller_that_stalls_is_cut_off_while_another_is_answered() -> None:
    with LocalApi(Echo(), TOKENS, timeout_s=0.5) as api, connect(api) as stalled:
        # Given a caller that sends its headers, announces a body and stalls
        started = time.monotonic()
        stalled.sendall(
            b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-acme\r\nContent-Length: 10\r\n\r\n"
        )
        # When another caller asks meanwhile  Then it is answered
        assert get(api, "/v1/tasks").status == 200
        # And the stalled caller's connection is closed, unanswered, once its time is up (not before)
        assert read_to_end(stalled) == b""
        assert time.monotonic() - started >= 0.5


def test_a_caller_that_trickles_its_headers_is_cut_off_at_its_deadline() -> None:
    with LocalApi(Echo(), TOKENS, timeout_s=0.5) as api, connect(api) as trickling:
        # Given a caller that sends one byte of its request line every 0.1 s (each within any per-read timeout)
        deadline = time.monotonic() + WAIT_S
        closed = False
        while not closed and time.monotonic() < deadline:
            trickling.send(b"G")
            readable, _, _ = select.select([trickling], [], [], 0.1)
            closed = bool(readable) and trickling.recv(1024) == b""
        # Then the server closes it: the request had 0.5 s in all to arrive
        assert closed


def test_an_idle_connection_is_closed_after_the_timeout() -> None:
    with LocalApi(Echo(), TOKENS, timeout_s=0.5) as api, connect(api) as idle:
        assert read_to_end(idle) == b""


def hold_slot(api: LocalApi) -> socket.socket:
    """A connection that holds one of the server's slots: its token checked, its thread waiting for the body its
    request announced (it said so: "100 Continue")."""
    sock = connect(api)
    sock.sendall(
        b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-acme\r\nContent-Length: 10\r\n"
        b"Expect: 100-continue\r\n\r\n"
    )
    assert sock.recv(1024).startswith(b"HTTP/1.1 100")
    return sock


def wait_for_status(api: LocalApi, status: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while get(api, "/v1/tasks").status != status and time.monotonic() < deadline:
        time.sleep(0.02)


def test_past_the_connection_limit_a_new_connection_is_answered_503_at_once() -> None:
    with LocalApi(Echo(), TOKENS, timeout_s=WAIT_S, max_connections=2) as api:
        # Given two connections that hold the server's two slots (their requests' bodies not sent yet)
        held = [hold_slot(api), hold_slot(api)]
        try:
            # When a third caller asks  Then it gets a 503 problem at once (not after WAIT_S)
            response = get(api, "/v1/tasks")
            assert response.status == 503
            assert response.headers["Content-Type"] == "application/problem+json"
            assert response.headers["Retry-After"] == "1"
        finally:
            for sock in held:
                sock.close()
        # And once they are gone, a caller is served again
        deadline = time.monotonic() + WAIT_S
        while (status := get(api, "/v1/tasks").status) == 503 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status == 200


def test_an_idle_connection_holds_no_slot_and_is_closed_at_the_header_deadline() -> None:
    with LocalApi(Echo(), TOKENS, timeout_s=WAIT_S, header_timeout_s=0.5, max_connections=1) as api:
        # Given a connection that sends nothing, on a server of one slot
        started = time.monotonic()
        with connect(api) as idle:
            # When a caller asks meanwhile  Then it is served: the idle connection holds no slot
            assert get(api, "/v1/tasks").status == 200
            # And the idle one is closed, unanswered, at its header deadline, not at the request timeout
            assert read_to_end(idle) == b""
            assert 0.5 <= time.monotonic() - started < WAIT_S / 2


def test_past_the_per_address_cap_the_connection_waiting_longest_is_closed() -> None:
    with LocalApi(Echo(), TOKENS, timeout_s=WAIT_S, header_timeout_s=WAIT_S, pending_per_address=4) as api:
        # Given four silent connections from 127.0.0.1, as many as may wait for their headers
        silent = [connect(api) for _ in range(4)]
        try:
            # When a caller connects and asks  Then it is answered
            started = time.monotonic()
            assert get(api, "/v1/tasks").status == 200
            # And the oldest silent one was closed to make room (not at its header deadline); the others wait
            assert read_to_end(silent[0]) == b""
            assert time.monotonic() - started < WAIT_S / 2
            readable, _, _ = select.select(silent[1:], [], [], 0)
            assert readable == []
        finally:
            for sock in silent:
                sock.close()


def test_a_refusal_waits_for_no_other_refused_caller() -> None:
    lingerers: list[socket.socket] = []
    with LocalApi(Echo(), TOKENS, timeout_s=WAIT_S, max_connections=1) as api, hold_slot(api):
        # Given the server's one slot held, and the time a refused caller takes to get its 503
        wait_for_status(api, 503)
        baseline = time.monotonic()
        assert get(api, "/v1/tasks").status == 503
        baseline = time.monotonic() - baseline
        try:
            # And 10 refused callers that neither read their answer nor close: each is lingered on
            count = 10
            for _ in range(count):
                sock = connect(api)
                sock.sendall(b"GET /v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-acme\r\n\r\n")
                lingerers.append(sock)
            # When another caller is refused  Then its 503 comes as soon as the first one's did (the lingering
            # ones hold nobody: one after the other, they would have held it count x LINGER_S)
            started = time.monotonic()
            assert get(api, "/v1/tasks").status == 503
            assert time.monotonic() - started < max(1.0, 10 * baseline)
        finally:
            for sock in lingerers:
                sock.close()


class SlowProbe:
    """``count`` connections to ``port`` held for ``duration_s`` (it stops by itself): every other one trickles
    the head of a request that never ends (one byte every ``step_s``, no token), the rest send nothing; one the
    server closes is opened again. ``peak``: the most held at once."""

    HEAD = b"GET /v1/tasks HTTP/1.1\r\nHost: x\r\nX-Pad: "

    def __init__(self, port: int, count: int, duration_s: float, step_s: float = 0.2) -> None:
        self.port, self.count, self.duration_s, self.step_s = port, count, duration_s, step_s
        self.peak = 0
        self.reopened = 0
        self.held = threading.Event()  # every connection opened once
        self._thread = threading.Thread(target=self._run, name="slow-probe", daemon=True)

    def __enter__(self) -> SlowProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join(self.duration_s + WAIT_S)

    def _open(self) -> socket.socket | None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=1.0)
        except OSError:
            return None
        sock.setblocking(False)
        return sock

    def _run(self) -> None:  # noqa: C901 - one non-blocking loop over every slow caller's socket, each in the state it reached
        socks: list[socket.socket | None] = [None] * self.count
        sent = [0] * self.count
        deadline = time.monotonic() + self.duration_s
        try:
            while time.monotonic() < deadline:
                for i, sock in enumerate(socks):
                    if sock is None:
                        socks[i], sent[i] = self._open(), 0
                        self.reopened += self.held.is_set()
                    elif i % 2 == 0:
                        byte = self.HEAD[sent[i] : sent[i] + 1] or b"a"
                        try:
                            sock.send(byte)
                            sent[i] += 1
                        except OSError:
                            sock.close()
                            socks[i] = None
                self.held.set()
                live = {sock.fileno(): i for i, sock in enumerate(socks) if sock is not None}
                self.peak = max(self.peak, len(live))
                poller = select.poll()
                for fd in live:
                    poller.register(fd, select.POLLIN)
                for fd, _ in poller.poll(0):  # closed by the server: opened again next round
                    sock = socks[live[fd]]
                    assert sock is not None
                    try:
                        closed = sock.recv(1024) == b""
                    except OSError:
                        closed = True
                    if closed:
                        sock.close()
                        socks[live[fd]] = None
                time.sleep(self.step_s)
        finally:
            for sock in socks:
                if sock is not None:
                    sock.close()


def timed_get(api: LocalApi, pool: urllib3.PoolManager | None) -> tuple[int, float]:
    """A request's status and how long its answer took, through ``pool`` (None: on a new connection)."""
    with contextlib.ExitStack() as stack:
        if pool is None:
            pool = stack.enter_context(urllib3.PoolManager())
        started = time.monotonic()
        response = pool.request(
            "GET", api.url + "/v1/tasks", headers={"Authorization": "Bearer tok-acme"}, retries=False, timeout=WAIT_S
        )
        return response.status, time.monotonic() - started


def test_200_slow_or_silent_connections_do_not_delay_a_caller() -> None:
    with (
        LocalApi(Echo(), TOKENS) as api,
        LocalApi(Echo(), TOKENS) as control,
        urllib3.PoolManager(maxsize=4) as pooled,
        urllib3.PoolManager(maxsize=4) as control_pooled,
    ):
        # Given a twin server that no slow connection reaches: its callers' latencies, measured beside, are the floor
        # of this machine at each moment (a busy machine slows both alike)
        port = int(api.url.rsplit(":", 1)[1])
        # When 200 connections trickle headers or send nothing, past the header deadline (so that the server
        # closes them and they come back)
        with SlowProbe(port, count=200, duration_s=3 * HEADER_TIMEOUT_S) as probe:
            assert probe.held.wait(WAIT_S)
            latencies, floor = [], []
            while probe._thread.is_alive():
                # Then every request is answered, on a new connection and on a pooled one, as fast as the twin's
                # are within a factor of 10 (and never held as long as half a slow connection's header deadline)
                for pool, control_pool in ((None, None), (pooled, control_pooled)):
                    status, latency = timed_get(api, pool)
                    assert status == 200
                    latencies.append(latency)
                    floor.append(timed_get(control, control_pool)[1])
                time.sleep(0.05)
        assert probe.peak == 200
        assert probe.reopened > 0
        assert len(latencies) >= 10
        bound = max(HEADER_TIMEOUT_S / 2, 10 * max(floor))
        assert max(latencies) < bound, (
            f"slowest {max(latencies):.3f} s, bound {bound:.3f} s (the twin's {max(floor):.3f} s)"
        )


# -- resolving in worker processes --------------------------------------------------------------------------------
def test_a_request_held_in_a_slow_operation_does_not_hold_another(tmp_path: Path) -> None:
    with LocalApi(HoldingApi(str(tmp_path)), TOKENS, workers=2, timeout_s=WAIT_S) as api, ThreadPoolExecutor(1) as pool:
        # Given a request held inside the resolver of one worker process
        held = pool.submit(get, api, "/hold")
        deadline = time.monotonic() + WAIT_S
        while not (tmp_path / "entered").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (tmp_path / "entered").exists()
        # When another request comes  Then it is answered while the first is still held
        response = urllib3.request(
            "POST",
            api.url + "/echo",
            json={"n": 1},
            retries=False,
            timeout=WAIT_S,
            headers={"Authorization": "Bearer tok-acme"},
        )
        assert response.status == 200
        assert response.json() == {"body": {"n": 1}, "again": {"n": 1}}
        assert not held.done()
        (tmp_path / "release").touch()
        assert held.result(timeout=WAIT_S).json() == {"held": True}


def test_requests_resolved_at_once_are_each_answered_from_their_own_body(tmp_path: Path) -> None:
    with LocalApi(HoldingApi(str(tmp_path)), TOKENS, workers=2, timeout_s=WAIT_S) as api, ThreadPoolExecutor(8) as pool:

        def echo(n: int) -> Any:
            return urllib3.request(
                "POST",
                api.url + "/echo",
                json={"n": n},
                retries=False,
                timeout=WAIT_S,
                headers={"Authorization": "Bearer tok-acme"},
            ).json()

        answers = list(pool.map(echo, range(24)))
    assert answers == [{"body": {"n": n}, "again": {"n": n}} for n in range(24)]


def test_worker_processes_need_a_resolver_factory_that_pickles() -> None:
    with pytest.raises(TypeError, match="pickles"):
        LocalApi(lambda: Echo(), TOKENS, workers=2)  # noqa: PLW0108 - a lambda, which does not pickle, is the point


# -- tenants ------------------------------------------------------------------------------------------------
def test_each_tenants_token_file_names_its_own_tenant(tmp_path: Path) -> None:
    # Given a stack home holding a token file of a tenant no longer served
    stack = LocalStack(StackConfig(home=tmp_path, tenants=("beta", "zeta", "beta", LOCAL_TENANT)))
    (tmp_path / "tokens").mkdir()
    (tmp_path / "tokens" / "gone").write_text("old\n")
    # When the stack writes its tokens
    tokens = stack._write_tokens()
    # Then local's is api-token, each other tenant's tokens/<tenant>, each 0600; the stale one is gone
    files = {tenant: str(path) for tenant, path in stack.api_token_files.items()}
    assert files == {
        "local": str(tmp_path / "api-token"),
        "beta": str(tmp_path / "tokens" / "beta"),
        "zeta": str(tmp_path / "tokens" / "zeta"),
    }
    assert sorted(tokens.values()) == ["beta", "local", "zeta"]
    assert not (tmp_path / "tokens" / "gone").exists()
    assert all(mode_of(Path(path)) == 0o600 for path in files.values())
    assert mode_of(tmp_path / "tokens") == 0o700
    # And a request with each tenant's token (as the CLI reads it from the state file) acts as that tenant
    state = {"api_token_files": files}
    with LocalApi(Echo(), tokens) as api:
        for tenant in ("local", "beta", "zeta"):
            assert get(api, "/v1/tasks", token=api_token(state, tenant)).json()["tenant"] == tenant
        assert get(api, "/v1/tasks", token="old").status == 401
    with pytest.raises(PunctualError, match="punctual up --tenant omega"):
        api_token(state, "omega")


def test_a_stack_given_a_bad_tenant_name_does_not_start(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    os.umask(umask)
    with pytest.raises(ValueError, match="not tenant names"):
        LocalStack(StackConfig(home=tmp_path / "home", tenants=("Beta",))).start()
    assert not (tmp_path / "home").exists()
    assert os.umask(umask) == umask  # left as it was


# -- a private home ---------------------------------------------------------------------------------------------
def test_a_homes_stack_files_are_made_private_and_nothing_else_is_touched(tmp_path: Path) -> None:
    # Given a home an earlier run left readable by everyone, with a file of the user's own and a link out
    home = tmp_path / "home"
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    outside.chmod(0o644)
    for folder in ("dynamodb/sub", "logs", "tokens"):
        (home / folder).mkdir(parents=True)
    for name in (
        "dynamodb/shared-local-instance.db",
        "dynamodb/sub/x",
        "logs/executor.log",
        "tokens/beta",
        "stack.json",
        "api-token",
        "fires.jsonl",
        "dlq.jsonl",
        "notes.txt",
    ):
        (home / name).write_text("x")
        (home / name).chmod(0o644)
    (home / "logs" / "link").symlink_to(outside)
    for made in (home, home / "dynamodb", home / "dynamodb" / "sub", home / "logs", home / "tokens"):
        made.chmod(0o755)
    # When the stack makes it private
    make_private(home)
    # Then the home and the stack's folders are 0700, its files 0600
    assert mode_of(home) == 0o700
    for folder in ("dynamodb", "dynamodb/sub", "logs", "tokens"):
        assert mode_of(home / folder) == 0o700, folder
    for name in (
        "dynamodb/shared-local-instance.db",
        "dynamodb/sub/x",
        "logs/executor.log",
        "tokens/beta",
        "stack.json",
        "api-token",
        "fires.jsonl",
        "dlq.jsonl",
    ):
        assert mode_of(home / name) == 0o600, name
    # And what is not the stack's is left as it was, a link's target included
    assert mode_of(home / "notes.txt") == 0o644
    assert mode_of(outside) == 0o644


def test_a_home_that_is_not_there_is_made_private(tmp_path: Path) -> None:
    make_private(tmp_path / "a" / "home")
    assert mode_of(tmp_path / "a" / "home") == 0o700
