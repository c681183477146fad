"""The REST API client on a broken wire: what it sends again and what it does not, and the local server answering
a failure of its own instead of dropping the connection."""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import urllib3

from punctual import LogAction
from punctual.errors import ApiError
from punctual.scheduling.api_client import ApiClient
from punctual_tools.local.api_server import LocalApi

NOT_FOUND = (404, {"type": "https://punctual.dev/problems/not-found", "title": "Not Found", "detail": "no task"})


class ScriptedServer:
    """A loopback HTTP/1.1 server answering its n-th request as ``script[n]`` says: ``"reset"`` (read it, then
    reset the connection: RST, no answer) or ``(status, json)``; past the script, the last entry again."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.requests: list[tuple[str, str, bytes]] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sock.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        with conn:
            while True:
                line = reader.readline()
                if not line:
                    return
                method, target, _ = line.decode().split(" ", 2)
                length = 0
                while (header := reader.readline()) not in (b"\r\n", b""):
                    name, _, value = header.decode().partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                body = reader.read(length) if length else b""
                self.requests.append((method, target, body))
                step = self.script[min(len(self.requests), len(self.script)) - 1]
                if step == "reset":
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return  # closed with linger 0: a reset, and no answer
                status, answer = step
                data = json.dumps(answer).encode()
                conn.sendall(
                    f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(data)}\r\n\r\n".encode()
                    + data
                )


def test_a_read_whose_connection_broke_is_sent_again() -> None:
    # Given a server that resets the first connection after reading the request, then answers
    with ScriptedServer(["reset", NOT_FOUND]) as server:
        client = ApiClient(server.url, token="t")
        # When a task is read
        found = client.get("a-task")
    # Then the read was sent twice and answered the second time
    assert found is None
    assert [r[:2] for r in server.requests] == [("GET", "/v1/tasks/a-task")] * 2


def test_a_create_whose_connection_broke_is_sent_again_with_the_same_id() -> None:
    due = datetime.now(UTC) + timedelta(minutes=5)
    stored = {
        "task_id": "chosen-later",
        "due_at": due.isoformat(),
        "action": {"kind": "log", "message": "m"},
        "payload": None,
        "status": "PENDING",
    }
    # Given a server that resets the first create, then answers it
    with ScriptedServer(["reset", (201, stored)]) as server:
        client = ApiClient(server.url, token="t")
        # When a task is scheduled without an id
        client.schedule(due, LogAction(message="m"))
    # Then both tries carried one id, chosen by the client (the second create is the same create)
    ids = [json.loads(body)["task_id"] for _, _, body in server.requests]
    assert len(ids) == 2 and ids[0] == ids[1] and len(ids[0]) == 32


def test_a_change_whose_connection_broke_is_not_sent_again_and_says_its_effect_is_unknown() -> None:
    # Given a server that resets the connection after reading the request
    with ScriptedServer(["reset", NOT_FOUND]) as server:
        client = ApiClient(server.url, token="t")
        # When a task is cancelled
        with pytest.raises(ApiError) as raised:
            client.cancel("a-task")
    # Then it was sent once (a cancel sent again could answer that the task is already cancelled), and the error
    # says there was no answer and the effect is unknown
    assert len(server.requests) == 1
    assert raised.value.status == 0
    assert "unknown" in raised.value.detail


def test_a_gateways_503_to_a_read_is_tried_again_and_an_unreachable_api_is_a_clear_error() -> None:
    with ScriptedServer([(503, {"message": "Service Unavailable"}), NOT_FOUND]) as server:
        assert ApiClient(server.url, token="t").get("a-task") is None
        assert len(server.requests) == 2
    # Given a port nothing listens on
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    with pytest.raises(ApiError) as raised:
        ApiClient(f"http://127.0.0.1:{port}", token="t").get("a-task")
    assert raised.value.status == 0
    assert "could not connect" in raised.value.detail and "3 tries" in raised.value.detail


class Boom:
    def resolve(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        if event["path"].endswith("/boom"):
            raise RuntimeError("a bug")
        return {"statusCode": 200, "headers": {"Content-Type": "application/json"}, "body": "{}"}


@pytest.fixture
def boom_api() -> Iterator[LocalApi]:
    with LocalApi(Boom, {"tok": "acme"}) as server:
        yield server


def test_the_local_api_answers_its_own_failure_with_a_500_problem_and_goes_on(boom_api: LocalApi) -> None:
    http = urllib3.PoolManager(retries=False)
    headers = {"Authorization": "Bearer tok"}
    # When the resolver fails on a request
    failed = http.request("GET", f"{boom_api.url}/v1/tasks/boom", headers=headers)
    # Then the caller gets a 500 problem (not a dropped connection), and the next request is answered
    assert failed.status == 500
    assert failed.headers["Content-Type"] == "application/problem+json"
    assert json.loads(failed.data)["status"] == 500
    assert http.request("GET", f"{boom_api.url}/v1/tasks/fine", headers=headers).status == 200
