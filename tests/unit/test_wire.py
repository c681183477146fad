"""punctual.targets.wire: how an answer is framed (so that its connection can serve the next request), with the
answer's bytes fed in arbitrary pieces."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from punctual.errors import WireError
from punctual.targets.wire import MAX_HEAD, _Connection


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def write(self, data: Any) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


def exchange(answer: bytes, pieces: list[int] | None = None, cap: int = 1_000, then_close: bool = False) -> Any:
    """Send one request on a fresh connection, feed ``answer`` cut at ``pieces``; the answer (or the error) and
    whether the transport was closed."""

    async def run() -> Any:
        connection = _Connection(cap)
        transport = FakeTransport()
        connection.connection_made(transport)
        waiter = connection.send(b"POST / HTTP/1.1\r\n\r\n")
        cuts = sorted({0, *(p % (len(answer) + 1) for p in (pieces or [])), len(answer)})
        for start, end in zip(cuts, cuts[1:], strict=False):
            connection.data_received(answer[start:end])
        if then_close:
            connection.connection_lost(None)
        try:
            return await asyncio.wait_for(waiter, 1), transport.closed
        except WireError as exc:
            return exc, transport.closed
        except TimeoutError:
            return None, transport.closed

    # A loop of its own, not asyncio.run: that leaves the main thread's current loop set to None, which code
    # run later in the same session (asyncio.get_event_loop() in the main thread) trips over.
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n"


@given(st.lists(st.integers(min_value=0, max_value=500), max_size=6))
def test_a_content_length_answer_ends_at_its_length_whatever_the_pieces(pieces: list[int]) -> None:
    answer, closed = exchange(OK, pieces)
    assert (answer.status, answer.body_read, answer.reusable, closed) == (200, 5, True, False)


@given(st.lists(st.integers(min_value=0, max_value=500), max_size=6))
def test_a_chunked_answer_ends_at_its_last_chunk_whatever_the_pieces(pieces: list[int]) -> None:
    answer, closed = exchange(CHUNKED, pieces)
    assert (answer.status, answer.body_read, answer.reusable, closed) == (200, 11, True, False)


def test_an_interim_answer_is_skipped() -> None:
    answer, _ = exchange(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + OK)
    assert answer.status == 200


def test_connection_close_and_http_1_0_are_not_reused() -> None:
    answer, closed = exchange(b"HTTP/1.1 500 X\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
    assert (answer.status, answer.reusable, closed) == (500, False, True)
    answer, closed = exchange(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert (answer.reusable, closed) == (False, True)


def test_an_answer_without_length_ends_when_the_connection_closes() -> None:
    answer, closed = exchange(b"HTTP/1.1 200 OK\r\n\r\nsome body", then_close=True)
    assert (answer.status, answer.body_read, answer.reusable) == (200, 9, False)


def test_a_body_past_the_cap_ends_the_answer_and_the_connection() -> None:
    answer, closed = exchange(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + b"x" * 2_000, cap=1_000)
    assert (answer.status, answer.reusable, closed) == (200, False, True)


def test_a_204_has_no_body() -> None:
    answer, closed = exchange(b"HTTP/1.1 204 No Content\r\n\r\n")
    assert (answer.status, answer.reusable, closed) == (204, True, False)


@pytest.mark.parametrize(
    "answer",
    [
        b"SMTP ready\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nX: " + b"a" * (MAX_HEAD + 10),
    ],
    ids=["not-http", "status-4-digits", "header-no-colon", "negative-length", "bad-chunk-size", "head-too-long"],
)
def test_a_malformed_answer_is_an_error_and_closes_the_connection(answer: bytes) -> None:
    error, closed = exchange(answer)
    assert isinstance(error, WireError)
    assert closed


def test_a_connection_lost_mid_answer_is_an_error() -> None:
    error, _ = exchange(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", then_close=True)
    assert isinstance(error, WireError)
