"""See every AWS call of the boto3 clients a function builds, through botocore's own events.

A client emits ``before-parameter-build.<service>.<Operation>`` once per API call, with the parameters as the
caller gave them, before anything is sent (moto and DynamoDB Local see the call only after it): a handler that
raises there stops the call, as AWS's AccessDenied would. :func:`watch_client` hooks one client;
:func:`on_every_new_client` hooks each client this process makes from then on, whatever session it comes from
(:func:`punctual.config.clients.aws_client` makes a session per client). :class:`CallRecorder` uses both to keep the
calls of each function a test runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import botocore.session
from botocore.client import BaseClient

from punctual_tools.iam.calls import AwsCall

OnCall = Callable[[AwsCall], None]
ClientT = TypeVar("ClientT", bound=BaseClient)  # a boto3 client of any service, its stubs' type kept

_lock = threading.Lock()
_watchers: list[Callable[[Any], None]] = []
_original_create_client: Callable[..., Any] | None = None


def watch_client(client: ClientT, on_call: OnCall, function: str | None = None) -> ClientT:
    """Call ``on_call`` with each API call ``client`` is asked to make (attributed to ``function``), before it is
    made; an exception ``on_call`` raises is the call's. Returns ``client``."""
    region = client.meta.region_name

    def seen(params: dict[str, Any], model: Any, **_: Any) -> None:
        on_call(AwsCall(model.service_model.service_name, model.name, dict(params), region, function))

    client.meta.events.register("before-parameter-build", seen)
    return client


def on_every_new_client(watch: Callable[[Any], None]) -> Callable[[], None]:
    """Call ``watch(client)`` with every botocore client this process makes from now on; returns the function that
    stops it. (botocore has no process-wide event for it: ``Session.create_client`` is wrapped while any watcher
    is registered.)"""
    global _original_create_client  # noqa: PLW0603  botocore's own, saved once for the process while it is wrapped
    with _lock:
        if _original_create_client is None:
            original = botocore.session.Session.create_client
            _original_create_client = original

            def create_client(self: botocore.session.Session, *args: Any, **kwargs: Any) -> Any:
                client = original(self, *args, **kwargs)
                with _lock:
                    watchers = list(_watchers)
                for each in watchers:
                    each(client)
                return client

            botocore.session.Session.create_client = create_client  # type: ignore[method-assign]
        _watchers.append(watch)

    def stop() -> None:
        global _original_create_client  # noqa: PLW0603  as above: put back when the last watcher leaves
        with _lock:
            if watch in _watchers:
                _watchers.remove(watch)
            if not _watchers and _original_create_client is not None:
                botocore.session.Session.create_client = _original_create_client  # type: ignore[method-assign]
                _original_create_client = None

    return stop


class CallRecorder:
    """Keeps the AWS calls of the clients built while a function is named.

    A test names the function whose code it runs (:meth:`acting_as`); every client that code builds, at its cold
    start or later and in any thread, records its calls under that name for as long as it lives. Clients built
    while no function is named (the test's own setup) record nothing. Use as a context manager.

    Examples
    --------
    >>> with CallRecorder() as recorder:                           # doctest: +SKIP
    ...     with recorder.acting_as("PollerFunction"):
    ...         poller = build_poller(settings)
    ...     poller.poll(now_ms)
    >>> recorder.of("PollerFunction")                              # doctest: +SKIP
    """

    def __init__(self) -> None:
        self.calls: list[AwsCall] = []
        self._lock = threading.Lock()
        self._function: str | None = None
        self._stop: Callable[[], None] | None = None

    def __enter__(self) -> CallRecorder:
        self._stop = on_every_new_client(self._watch)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None

    @contextmanager
    def acting_as(self, function: str) -> Iterator[None]:
        """Clients built inside the block belong to ``function`` (a logical id of the template)."""
        before, self._function = self._function, function
        try:
            yield
        finally:
            self._function = before

    def watch(self, client: ClientT, function: str) -> ClientT:
        """Record ``client``'s calls as ``function``'s (a client built outside :meth:`acting_as`)."""
        return watch_client(client, self._record, function)

    def of(self, function: str) -> list[AwsCall]:
        with self._lock:
            return [c for c in self.calls if c.function == function]

    def _watch(self, client: Any) -> None:
        if self._function is not None:
            watch_client(client, self._record, self._function)

    def _record(self, call: AwsCall) -> None:
        with self._lock:
            self.calls.append(call)
