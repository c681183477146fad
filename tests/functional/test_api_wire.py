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
from punctual.errors import ApiError, QuotaExceededError
from punctual.scheduling.api_client import ATTEMPTS, BACKOFF_S, RETRY_AFTER_MAX_S, ApiClient, backoff_s
from punctual_tools.local.api_server import LocalApi

NOT_FOUND = (404, {"type": "https://punctual.dev/problems/not-found", "title": "Not Found", "detail": "no task"})


class ScriptedServer:
    """A loopback HTTP/1.1 server answering its n-th request as ``script[n]`` says: ``"reset"`` (read it, then
    reset the connection: RST, no answer) or ``(status, json)`` (or ``(status, json, headers)``); past the script,
    the last entry again."""

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
                status, answer, *extra = step
                headers = "".join(f"{k}: {v}\r\n" for k, v in (extra[0] if extra else {}).items())
                data = json.dumps(answer).encode()
                conn.sendall(
                    f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{headers}"
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
    assert len(ids) == 2
    assert ids[0] == ids[1]
    assert len(ids[0]) == 32


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
    # Given a server that answers a read 503 once, then the answer
    with ScriptedServer([(503, {"message": "Service Unavailable"}), NOT_FOUND]) as server:
        assert ApiClient(server.url, token="t").get("a-task") is None
        assert len(server.requests) == 2
    # Given a port nothing listens on
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    with pytest.raises(ApiError) as raised:
        ApiClient(f"http://127.0.0.1:{port}", token="t").get("a-task")
    assert raised.value.status == 0
    assert "could not connect" in raised.value.detail
    assert f"{ATTEMPTS} tries" in raised.value.detail


STORED = {
    "task_id": "t-1",
    "due_at": "2030-01-01T00:00:00+00:00",
    "action": {"kind": "log", "message": "m"},
    "payload": None,
    "status": "PENDING",
}


class Sleeps(list[float]):
    """The waits a client made between tries, instead of making them."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
@pytest.mark.parametrize("call", ["create", "read"])
def test_an_overloaded_or_failing_api_is_tried_again_for_a_create_or_a_read(status: int, call: str) -> None:
    # Given an API that answers twice `status` (a throttle, a failed or throttled function, no answer from it)
    with ScriptedServer([(status, {"message": "busy"}), (status, {"message": "busy"}), (201, STORED)]) as server:
        sleeps = Sleeps()
        client = ApiClient(server.url, token="t", sleep=sleeps)
        # When a task is created (with its id) or read
        if call == "create":
            client.schedule(datetime(2030, 1, 1, tzinfo=UTC), LogAction(message="m"), task_id="t-1")
        else:
            assert client.get("t-1") is not None
    # Then it was sent three times, the same request each time, with a growing cap on the waits between
    assert len(server.requests) == 3
    assert len({body for _, _, body in server.requests}) == 1
    assert len(sleeps) == 2
    assert all(0 <= wait <= BACKOFF_S * 2**i for i, wait in enumerate(sleeps))


@pytest.mark.parametrize("status", [429, 500, 503])
def test_a_batch_answered_a_throttle_or_a_server_error_is_sent_again_whole_with_the_same_ids(status: int) -> None:
    due = datetime(2030, 1, 1, tzinfo=UTC)
    answer = {"results": [{"index": i, "task_id": STORED["task_id"], "outcome": "created", "status": 201,
                           "task": STORED} for i in range(2)]}  # fmt: skip
    # Given an API that answers a batch `status` twice, then takes it
    with ScriptedServer([(status, {"message": "busy"}), (status, {"message": "busy"}), (200, answer)]) as server:
        client = ApiClient(server.url, token="t", sleep=Sleeps())
        # When two tasks without ids are scheduled at once
        results = client.schedule_many([{"due_at": due, "action": LogAction(message="m")}] * 2)
    # Then one call went three times, the same body each time (the ids the client chose), and each task is created
    assert [r[:2] for r in server.requests] == [("POST", "/v1/tasks:batch")] * 3
    assert len({body for _, _, body in server.requests}) == 1
    ids = [t["task_id"] for t in json.loads(server.requests[0][2])["tasks"]]
    assert len(set(ids)) == 2
    assert all(len(i) == 32 for i in ids)
    assert [r.outcome for r in results] == ["created", "created"]


def test_a_change_answered_500_is_not_sent_again() -> None:
    # Given an API whose function fails
    with ScriptedServer([(500, {"message": "Internal server error"}), NOT_FOUND]) as server:
        client = ApiClient(server.url, token="t", sleep=Sleeps())
        # When a task is cancelled
        with pytest.raises(ApiError) as raised:
            client.cancel("t-1")
    # Then it was sent once: a cancel that took effect before the failure would answer differently the second time
    assert len(server.requests) == 1
    assert raised.value.status == 500


def test_the_apis_own_quota_answer_is_not_tried_again() -> None:
    quota = {
        "type": "https://punctual.dev/problems/quota",
        "title": "Too Many Requests",
        "detail": "over",
        "quota": "active_tasks",
    }
    # Given an API that refuses a create past the tenant's quota
    with ScriptedServer([(429, quota)]) as server:
        client = ApiClient(server.url, token="t", sleep=Sleeps())
        # When a task is created
        with pytest.raises(QuotaExceededError):
            client.schedule(datetime(2030, 1, 1, tzinfo=UTC), LogAction(message="m"), task_id="t-1")
    # Then it was sent once: no retry makes room in a quota
    assert len(server.requests) == 1


def test_past_the_last_try_the_last_answer_is_the_error() -> None:
    # Given an API that always answers 503
    with ScriptedServer([(503, {"message": "Service Unavailable"})]) as server:
        sleeps = Sleeps()
        # When a task is read
        with pytest.raises(ApiError) as raised:
            ApiClient(server.url, token="t", sleep=sleeps).get("t-1")
    # Then it was tried ATTEMPTS times, and the caller sees the 503
    assert len(server.requests) == ATTEMPTS
    assert len(sleeps) == ATTEMPTS - 1
    assert raised.value.status == 503


def test_a_retry_after_is_waited_for_up_to_its_cap() -> None:
    # Given a throttle that says when to come back: 3 s, then an hour
    script = [(429, {}, {"Retry-After": "3"}), (429, {}, {"Retry-After": "3600"}), (200, STORED)]
    with ScriptedServer(script) as server:
        sleeps = Sleeps()
        # When a task is read
        ApiClient(server.url, token="t", sleep=sleeps).get("t-1")
    # Then the client waited 3 s, then its cap, not an hour
    assert sleeps == [3.0, RETRY_AFTER_MAX_S]


@pytest.mark.parametrize("attempt", [1, 2, 3, 4])
def test_the_backoff_is_a_random_share_of_a_doubling_cap(attempt: int) -> None:
    # Given the draws at both ends of the range  Then the waits span [0, BACKOFF_S * 2**(attempt - 1)]
    assert backoff_s(attempt, draw=lambda low, high: low) == 0.0
    assert backoff_s(attempt, draw=lambda low, high: high) == BACKOFF_S * 2 ** (attempt - 1)
    # ... and an unreadable Retry-After falls back to it
    assert backoff_s(attempt, "Wed, 21 Oct 2030 07:28:00 GMT", draw=lambda low, high: high) == BACKOFF_S * 2 ** (
        attempt - 1
    )


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
