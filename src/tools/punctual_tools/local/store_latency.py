"""The store as far away as DynamoDB is from Lambda: a latency model for the local stand-ins' DynamoDB calls.

DynamoDB Local answers on loopback in well under a millisecond; a Lambda function's call to DynamoDB in its
region crosses the network and TLS. Under the Lambda profile (``LocalSettings.store_latency``, default
``dynamodb-in-region``; ``none`` under the local profile) every DynamoDB call the local stand-ins of the
functions make (executor workers, the poller and the fast path in the stack's process, the API) goes through
:class:`StoreLatency`, two botocore hooks on its client:

- ``before-send``: sleeps the first half of a round trip drawn from the model (wall time, no CPU) and burns
  the CPU that TLS costs to encrypt the request's bytes;
- ``response-received``: sleeps the other half and burns the CPU to decrypt the response's bytes.

Each attempt is delayed, retries included (each crosses the network in AWS). The stack's own calls (creating
the table, fencing a dead stack's executors) and the tools' are not: they are no function's.

**The distribution** (:data:`DYNAMODB_IN_REGION`). A round trip is a lognormal body, plus, for a small share of
requests, a lognormal tail (a slow node, a server-side retry), by operation class:

========================  ==========  =========  ==========  =============  ===========
class (operations)        median ms   sigma      tail share  tail median    ≈ p50 / p99
========================  ==========  =========  ==========  =============  ===========
point (Get/Put/Update/    3.0         0.35       2 %         12 ms          3 / 16 ms
Delete, others)
read (Query, BatchGet,    4.5         0.40       2 %         15 ms          4.5 / 20 ms
TransactGet, Scan)
batch write               6.0         0.40       3 %         18 ms          6 / 30 ms
transaction (TransactW.)  8.0         0.40       3 %         20 ms          8 / 35 ms
========================  ==========  =========  ==========  =============  ===========

The figures are this model's choice within what is published: AWS states single-digit-millisecond averages for
GetItem and PutItem within a region ("Why are my Amazon DynamoDB requests taking a long time", AWS re:Post
knowledge center; "Understanding Amazon DynamoDB latency", AWS Database Blog), and that latency grows with item
and result size (10 vs 100 items) and that occasional spikes in p99 and the maximum are normal, from background
operations and a first attempt that a server retries on another node ("Troubleshooting latency issues in Amazon
DynamoDB", DynamoDB developer guide; "high maximum latency", re:Post). Transactions cost more than single writes
(two phases; "Distributed Transactions at Scale in Amazon DynamoDB", USENIX ATC 2023) and grow with their item
count (Alex DeBrie, "DynamoDB Transactions Performance Testing"). ``SuccessfulRequestLatency`` leaves out the
network and the client: the medians add a few hundred microseconds of in-region network to it.

**TLS's CPU** (:class:`TlsCost`). botocore keeps its connections open, so a warm request pays record
encryption, not a handshake: measured once with Python's ``ssl`` over a local socketpair (TLS 1.3, AES-GCM, a
2-core x86 machine), one request and one response cost about 6 µs more CPU than the plain socket, plus about
0.85 µs per KiB either way. The handshake of a new connection (about a millisecond of CPU, once per pooled
connection) is left out.

**Determinism.** A process draws from one ``random.Random`` seeded by ``(store_latency_seed, pid)``, under a
lock (the store's thread pool draws from many threads): the n-th draw of a process is fixed by the seed and
its pid; which call gets the n-th draw depends on how its threads interleave.
"""

from __future__ import annotations

import math
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from punctual.config.settings import Settings
from punctual_tools.iam.recorder import ClientT, on_every_new_client

NONE = "none"
SERVICE = "dynamodb"


@dataclass(frozen=True)
class OperationLatency:
    """One class of operations: a lognormal body (``median_ms``, ``sigma``), and with probability
    ``tail_share`` a lognormal tail (``tail_median_ms``, ``tail_sigma``) added to it."""

    median_ms: float
    sigma: float
    tail_share: float
    tail_median_ms: float
    tail_sigma: float = 0.6

    def sample_ms(self, rng: random.Random) -> float:
        """One round trip (ms)."""
        body = rng.lognormvariate(math.log(self.median_ms), self.sigma)
        if rng.random() < self.tail_share:
            body += rng.lognormvariate(math.log(self.tail_median_ms), self.tail_sigma)
        return body


@dataclass(frozen=True)
class TlsCost:
    """The client's CPU for TLS on a warm connection: ``per_request_us`` for a request and its response, and
    ``per_kib_us`` for each KiB sent or received."""

    per_request_us: float = 6.0
    per_kib_us: float = 0.85

    def seconds(self, nbytes: int, *, with_request: bool) -> float:
        """The CPU seconds of ``nbytes`` sent or received (and of the request itself if ``with_request``)."""
        return ((self.per_request_us if with_request else 0.0) + self.per_kib_us * nbytes / 1024) / 1e6


@dataclass(frozen=True)
class LatencyModel:
    """A named latency model: a class per operation (``classes``: operation -> class name, ``default`` for the
    rest), each class's :class:`OperationLatency`, and TLS's CPU."""

    name: str
    latencies: dict[str, OperationLatency]
    classes: dict[str, str]
    default: str
    tls: TlsCost = field(default_factory=TlsCost)
    outbound_share: float = 0.5  # the part of a round trip slept before the request is sent

    def latency_of(self, operation: str) -> OperationLatency:
        return self.latencies[self.classes.get(operation, self.default)]

    def describe(self, seed: int | None = None) -> str:
        """One line: the name, each class's median, and TLS's CPU."""
        classes = ", ".join(f"{name} {lat.median_ms:g} ms" for name, lat in self.latencies.items())
        seeded = "" if seed is None else f", seed {seed}"
        return (
            f"{self.name} (median round trip: {classes}; lognormal with a rare tail; TLS "
            f"{self.tls.per_request_us:g} µs + {self.tls.per_kib_us:g} µs/KiB of CPU{seeded})"
        )

    def as_dict(self, seed: int | None = None) -> dict[str, Any]:
        """The model's name and parameters, for a benchmark's JSON."""
        return {
            "name": self.name,
            "seed": seed,
            "latencies": {name: asdict(lat) for name, lat in self.latencies.items()},
            "classes": dict(self.classes),
            "default": self.default,
            "tls": asdict(self.tls),
            "outbound_share": self.outbound_share,
        }


DYNAMODB_IN_REGION = LatencyModel(
    name="dynamodb-in-region",
    latencies={
        "point": OperationLatency(3.0, 0.35, 0.02, 12.0),
        "read": OperationLatency(4.5, 0.40, 0.02, 15.0),
        "batch-write": OperationLatency(6.0, 0.40, 0.03, 18.0),
        "transaction": OperationLatency(8.0, 0.40, 0.03, 20.0),
    },
    classes={
        "Query": "read",
        "Scan": "read",
        "BatchGetItem": "read",
        "TransactGetItems": "read",
        "BatchWriteItem": "batch-write",
        "TransactWriteItems": "transaction",
    },
    default="point",
)
MODELS = {DYNAMODB_IN_REGION.name: DYNAMODB_IN_REGION}


def burn_cpu(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU (a busy loop on its CPU clock)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class StoreLatency:
    """Draws round trips from ``model`` (seeded by ``seed`` and ``stream``, default this process's pid) and
    delays the calls of the clients it is installed on (:meth:`install`). ``sleep`` and ``burn`` are injected
    in tests."""

    def __init__(
        self,
        model: LatencyModel,
        seed: int = 0,
        stream: int | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        burn: Callable[[float], None] = burn_cpu,
    ) -> None:
        self.model = model
        self.seed = seed
        self.stream = os.getpid() if stream is None else stream
        self._rng = random.Random(f"{seed}:{self.stream}")
        self._lock = threading.Lock()
        self.draws = 0  # round trips drawn so far (requests delayed)
        self._pending = threading.local()  # the rest of this thread's round trip, slept when its response comes
        self._sleep = sleep
        self._burn = burn

    def sample_ms(self, operation: str) -> float:
        """The next round trip (ms) of ``operation``, from this process's sequence."""
        latency = self.model.latency_of(operation)
        with self._lock:
            self.draws += 1
            return latency.sample_ms(self._rng)

    def describe(self) -> str:
        return self.model.describe(self.seed)

    def as_dict(self) -> dict[str, Any]:
        return self.model.as_dict(self.seed)

    def install(self, client: ClientT) -> ClientT:
        """Delay every request of ``client`` (a DynamoDB client; another is left alone); returns it."""
        if client.meta.service_model.service_name != SERVICE:
            return client
        client.meta.events.register(f"before-send.{SERVICE}", self._before_send)
        client.meta.events.register(f"response-received.{SERVICE}", self._after_response)
        return client

    def _before_send(self, request: Any, event_name: str, **_: Any) -> None:
        total_s = self.sample_ms(event_name.rsplit(".", 1)[-1]) / 1000
        outbound = total_s * self.model.outbound_share
        self._pending.seconds = total_s - outbound
        self._burn(self.model.tls.seconds(_length(request.body), with_request=True))
        self._sleep(outbound)  # returns None: botocore sends the request

    def _after_response(self, response_dict: dict[str, Any] | None = None, **_: Any) -> None:
        rest = getattr(self._pending, "seconds", 0.0)
        self._pending.seconds = 0.0
        body = (response_dict or {}).get("body") or b""
        self._burn(self.model.tls.seconds(_length(body), with_request=False))
        self._sleep(rest)


def _length(body: Any) -> int:
    if isinstance(body, bytes | bytearray | str):
        return len(body)
    return 0


def store_latency_of(settings: Settings) -> StoreLatency | None:
    """This process's :class:`StoreLatency` for ``settings`` (a ``LocalSettings``' ``store_latency`` and
    ``store_latency_seed``; plain :class:`Settings`, or ``none``: None). One per process and model, so that
    every client of the process draws from one sequence."""
    name = getattr(settings, "store_latency", NONE)
    if name == NONE:
        return None
    seed = int(getattr(settings, "store_latency_seed", 0))
    key = (name, seed, os.getpid())
    with _instances_lock:
        if key not in _instances:
            _instances[key] = StoreLatency(MODELS[name], seed)
        return _instances[key]


_instances: dict[tuple[str, int, int], StoreLatency] = {}
_instances_lock = threading.Lock()


def with_store_latency(client: ClientT, settings: Settings) -> ClientT:
    """``client``, delayed as ``settings`` say (see :func:`store_latency_of`); returns it."""
    latency = store_latency_of(settings)
    return client if latency is None else latency.install(client)


def install_store_latency(settings: Settings) -> StoreLatency | None:
    """Delay every DynamoDB client this process builds from now on, as ``settings`` say: for a process that runs
    one function (an executor worker), before its handler module builds its store. The model, or None."""
    latency = store_latency_of(settings)
    if latency is not None:
        on_every_new_client(latency.install)
    return latency
