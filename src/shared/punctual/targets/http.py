"""The ``http`` action: POST the payload as JSON to a URL, safely, with many requests in flight at once.

Safety (the rules are :mod:`punctual.network.policy`'s): https unless configured otherwise; the host's every
address must be public unless allowlisted (``PUNCTUAL_ALLOWED_TARGETS``), checked when the task is scheduled
and again when it fires, on the addresses the host resolves to then (resolved once, checked, and connected to
one of exactly the checked addresses: no second lookup). No redirect is followed, one deadline covers
connect, send and read, at most :data:`BODY_CAP` bytes of the answer are read. Headers
that would change how the request is framed or routed, or forge Punctual's own, are refused. Header names are
compared without regard to case, as HTTP does, and none is sent twice (:func:`merge_headers` says which wins).

Firing: runs on the process's event loop (:class:`~punctual.targets.registry.FireLoop`) through a small HTTP/1.1
client (:mod:`punctual.targets.wire`) with a keep-alive pool per host, so a slow target holds no thread and does
not delay another fire, and a burst of webhooks costs little interpreter time. When an executor has armed its
batch, :func:`prepare_http` opens the connections a run of webhooks due together will need, shortly before it
is due, so that the burst does not pay for TCP (and TLS) handshakes at its instant.
A transient failure (connection error, timeout, 429, 5xx) is tried again, with the same idempotency key,
while the occurrence is still within its grace (``retry_transient=False`` turns this off).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping
from functools import partial
from typing import ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import AnyHttpUrl, Field, field_validator

from punctual.domain.model import Action, canonical_json
from punctual.errors import (
    ActionFailedError,
    InvalidRequestError,
    SecretReferenceError,
    SecretUnavailableError,
    SigningSecretError,
    TargetRefusedError,
    TransientActionError,
    WireError,
    is_transient_status,
)
from punctual.network.hosts import MAX_URL_LENGTH
from punctual.network.policy import Target, TargetPolicy
from punctual.targets.registry import ActionEnv, ActionKind, FireContext, TargetRules, Warmup
from punctual.targets.secrets import parse_secret_ref
from punctual.targets.signing import parse_signing_secrets, signature_headers
from punctual.targets.wire import WirePool

BODY_CAP = 64 * 1024  # bytes of an answer read; the rest is not read (and the connection not reused)
MAX_HEADERS = 32
MAX_HEADER_VALUE = 4_096  # characters of one header value
MAX_HEADERS_TOTAL = 16_384  # characters of all names and values together
MAX_ATTEMPTS = 3  # a transient failure is tried again at most twice, within the grace
RETRY_DELAYS_S = (0.1, 0.5)
USER_AGENT = "punctual/0.1"
TARGET_CACHE = 4_096  # checked URLs an engine remembers
INVOCATION_MARGIN_MS = 15_000  # a retry must end this long before the invocation does (to record the outcome)
# Warm-ups (:func:`prepare_http`): webhooks due within TOGETHER_S of each other to one host get as many
# connections opened WARM_LEAD_S before the first of them (well inside the pool's idle limit, and short enough
# that a server's own keep-alive timeout, commonly 5 s or more, does not close them first).
WARM_LEAD_S = 1.0
TOGETHER_S = 0.05
WARM_MIN_S = 0.2
_SUCCESS = range(200, 300)  # the statuses a fire succeeds with
_REDIRECT = range(300, 400)  # not followed: named in the outcome

_HEADER_NAME_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}")
_HEADER_VALUE_RE = re.compile(r"[\t\x20-\x7e]*")  # visible ASCII, space and tab
# Headers a task may not set: they frame or route the request (the client sets them), or forge what Punctual
# itself sends (the idempotency key, its own fields, the webhook signature), or would make an AWS API call.
_FRAMING = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "expect",
        "proxy-authorization",
        "proxy-connection",
        "content-encoding",
    }
)
_OWN = frozenset({"idempotency-key", "webhook-id", "webhook-timestamp", "webhook-signature"})
_FORBIDDEN_PREFIXES = ("x-amz-", "x-amzn-", "x-punctual-", "proxy-")


def _header_problem(name: str) -> str | None:
    low = name.lower()
    if not _HEADER_NAME_RE.fullmatch(name):
        return "is not an RFC 9110 token (of at most 128 characters)"
    if low in _FRAMING:
        return "is set by the HTTP client and may not be given"
    if low in _OWN or low.startswith(_FORBIDDEN_PREFIXES):
        return "is reserved (Punctual's own, the webhook signature's, AWS's or a proxy's)"
    return None


class HttpAction(Action):
    """POST the payload as JSON to ``url``, with an ``Idempotency-Key`` header (task id + occurrence).

    ``headers`` are sent as given (visible ASCII; not the reserved ones). ``secret_headers`` maps a header to a
    secret *reference* (``env:PUNCTUAL_SECRET_X``, ``file:name``, ``ssm:/punctual/x``,
    ``secretsmanager:punctual/x#key``): the executor resolves it when it fires, so the table holds only the
    reference. ``signing_secret`` names the endpoint's Standard Webhooks secret(s) the same way: each fire is
    signed (``webhook-id`` = the idempotency key, ``webhook-timestamp``, ``webhook-signature``).
    ``timeout_s`` bounds each attempt as a whole (connect, send, read).
    """

    kind: Literal["http"] = "http"
    url: AnyHttpUrl
    headers: dict[str, str] = Field(default_factory=dict, max_length=MAX_HEADERS)
    secret_headers: dict[str, str] = Field(default_factory=dict, max_length=8)
    signing_secret: str | None = Field(None, max_length=2_048)
    timeout_s: float = Field(10.0, gt=0, le=60)
    retry_transient: bool = True

    # Fields added after tasks were first stored: left out of the content hash while at their default.
    late_fields: ClassVar[frozenset[str]] = frozenset({"secret_headers", "signing_secret", "retry_transient"})

    @field_validator("url")
    @classmethod
    def _static_url_rules(cls, url: AnyHttpUrl) -> AnyHttpUrl:
        """What is refused whatever the configuration: another scheme, credentials in the URL, an overlong URL
        (the rest, which depends on the allowlist, is :func:`check_http`'s)."""
        if url.scheme not in ("http", "https"):
            raise ValueError("url must be http or https")
        if url.username is not None or url.password is not None or "@" in (url.host or ""):
            raise ValueError("url must not carry credentials (user:password@): use headers or secret_headers")
        if len(str(url)) > MAX_URL_LENGTH:
            raise ValueError(f"url is longer than {MAX_URL_LENGTH} characters")
        return url

    @field_validator("headers")
    @classmethod
    def _sendable_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        """Names are RFC 9110 tokens and not reserved; values visible ASCII (no CR, LF or NUL: no header
        injection; nothing that fails at every fire); sizes bounded. Refused when scheduled, not when fired."""
        total = 0
        for name, value in headers.items():
            problem = _header_problem(name)
            if problem:
                raise ValueError(f"header {name[:64]!r} {problem}")
            if not _HEADER_VALUE_RE.fullmatch(value):
                raise ValueError(f"header {name!r} must be visible ASCII (no CR, LF, NUL or non-ASCII characters)")
            if len(value) > MAX_HEADER_VALUE:
                raise ValueError(f"header {name!r} is longer than {MAX_HEADER_VALUE} characters")
            total += len(name) + len(value)
        if total > MAX_HEADERS_TOTAL:
            raise ValueError(f"headers add up to more than {MAX_HEADERS_TOTAL} characters")
        return headers

    @field_validator("secret_headers")
    @classmethod
    def _secret_header_refs(cls, refs: dict[str, str]) -> dict[str, str]:
        for name, ref in refs.items():
            problem = _header_problem(name)
            if problem:
                raise ValueError(f"secret header {name[:64]!r} {problem}")
            try:
                parse_secret_ref(ref)
            except SecretReferenceError as exc:
                raise ValueError(f"secret header {name!r}: {exc}") from None
        return refs

    @field_validator("signing_secret")
    @classmethod
    def _signing_ref(cls, ref: str | None) -> str | None:
        if ref is None:
            return None
        if ref.startswith("whsec_"):
            raise ValueError(
                "signing_secret is a reference to the secret (env:, file:, ssm:, secretsmanager:), "
                "not the secret itself: the table must never hold it"
            )
        try:
            parse_secret_ref(ref)
        except SecretReferenceError as exc:
            raise ValueError(f"signing_secret: {exc}") from None
        return ref


def check_http(action: HttpAction, rules: TargetRules) -> None:
    """The target rules at schedule time: scheme, allowlist, any spelling of a non-public address; and no header
    named twice, in any case, within ``headers`` or within ``secret_headers``."""
    for field, given in (("action.headers", action.headers), ("action.secret_headers", action.secret_headers)):
        if len({name.lower() for name in given}) < len(given):
            # stored as canonical JSON (keys sorted), so which of the two was meant could not be kept
            raise InvalidRequestError(field, "a header is given twice (names are compared without regard to case)")
    try:
        rules.urls.check_url(str(action.url))
    except TargetRefusedError as exc:
        raise InvalidRequestError("action.url", str(exc)) from None
    for name, ref in action.secret_headers.items():
        try:
            parse_secret_ref(ref, rules.secrets)
        except SecretReferenceError as exc:
            raise InvalidRequestError("action.secret_headers", f"{name}: {exc}") from None
    if action.signing_secret is not None:
        try:
            parse_secret_ref(action.signing_secret, rules.secrets)
        except SecretReferenceError as exc:
            raise InvalidRequestError("action.signing_secret", str(exc)) from None


def merge_headers(*layers: Mapping[str, str]) -> dict[str, str]:
    """The headers of ``layers`` as one request sends them, names compared without regard to case: a header
    replaces one of the same name given before it (in an earlier layer, or earlier in its own), whatever the
    case of either, and is sent under its own spelling, in the first one's place. No name is sent twice.

    A webhook's layers, each winning over those before it: the defaults (``Content-Type``, ``User-Agent``),
    the task's ``headers``, its ``secret_headers``, Punctual's own (``Idempotency-Key``, ``X-Punctual-*``),
    the signature's (``webhook-*``).
    """
    merged: dict[str, tuple[str, str]] = {}
    for layer in layers:
        for name, value in layer.items():
            merged[name.lower()] = (name, value)
    return dict(merged.values())


def request_bytes(target: Target, url: str, headers: dict[str, str], body: bytes) -> bytes:
    """The whole POST as sent: request line, ``Host``, ``Content-Length``, the headers (validated visible ASCII
    when the task was scheduled, or when its secret was resolved), the body."""
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {target.origin.split('://', 1)[1]}",
        f"Content-Length: {len(body)}",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class HttpEngine:
    """The process's webhook sender: one :class:`~punctual.targets.wire.WirePool` (kept-alive connections per
    host, names resolved and checked once per :data:`~punctual.targets.wire.DNS_TTL_S`), used on the event loop."""

    def __init__(self, policy: TargetPolicy, connections: int, connections_per_host: int) -> None:
        self._policy = policy
        self._pool = WirePool(policy, connections, connections_per_host, BODY_CAP)
        self._targets: dict[str, Target] = {}

    def target(self, url: str) -> Target:
        """``url`` checked by the policy's static rules (raises TargetRefusedError), remembered: a burst's
        webhooks mostly share a few URLs, and the check is pure (addresses are checked at connect time)."""
        target = self._targets.get(url)
        if target is None:
            target = self._policy.check_url(url)
            if len(self._targets) >= TARGET_CACHE:
                self._targets.clear()
            self._targets[url] = target
        return target

    async def post(
        self, target: Target, url: str, headers: dict[str, str], body: bytes, timeout_s: float
    ) -> tuple[int, int]:
        """POST once; the status and the body bytes read (at most :data:`BODY_CAP`). Raises
        :class:`TransientActionError` for connection errors and timeouts, :class:`ActionFailedError` for a
        refused address; messages name ``scheme://host[:port]`` only."""
        try:
            return await self._pool.post(target, request_bytes(target, url, headers, body), timeout_s)
        except TargetRefusedError as exc:
            raise ActionFailedError(f"POST {target.origin} refused: {exc}") from None
        except TimeoutError:
            raise TransientActionError(f"POST {target.origin} timed out after {timeout_s:g} s") from None
        except WireError as exc:
            raise TransientActionError(f"POST {target.origin} failed: {exc}") from None
        except OSError as exc:
            raise TransientActionError(f"POST {target.origin} failed: {exc.strerror or type(exc).__name__}") from None

    async def idle(self, url: str) -> int:
        """How many connections to ``url``'s host wait idle in the pool now."""
        return await self._pool.idle(self.target(url))

    async def warm(self, target: Target, count: int, fire_in_s: float) -> int:
        """Open connections to ``target`` ahead of ``count`` fires due together in ``fire_in_s`` (see
        ``WirePool.warm``)."""
        return await self._pool.warm(target, count, fire_in_s)

    async def close(self) -> None:
        self._pool.close()


def _engine(env: ActionEnv, rules: TargetRules) -> HttpEngine:
    """The engine of ``rules``' tenant (the deployment's for a task without one): each tenant's connections and
    resolved addresses are its own, checked by its own allowlist, so a connection or an address another tenant
    may use is never reused for it."""
    name = "http" if rules.tenant is None else f"http:{rules.tenant}"
    return env.resource(name, lambda: HttpEngine(rules.urls, env.http_connections, env.http_connections_per_host))


async def _resolve(env: ActionEnv, rules: TargetRules, ref: str) -> str:
    """A secret's value, resolved off the loop (a first fetch is an AWS call; later ones hit the cache), if the
    task's tenant may name it."""
    try:
        return await asyncio.get_running_loop().run_in_executor(None, env.secrets.resolve, ref, rules.secrets)
    except (SecretUnavailableError, SecretReferenceError) as exc:
        raise ActionFailedError(str(exc)) from None


async def _secret_header(env: ActionEnv, rules: TargetRules, name: str, ref: str) -> str:
    value = await _resolve(env, rules, ref)
    if not _HEADER_VALUE_RE.fullmatch(value) or len(value) > MAX_HEADER_VALUE:
        # Checked here because the value was never seen when the task was scheduled (no header injection).
        raise ActionFailedError(
            f"secret header {name}: the value of {ref} is not a sendable header value "
            f"(visible ASCII, at most {MAX_HEADER_VALUE} characters)"
        )
    return value


async def run_http(action: HttpAction, context: FireContext, env: ActionEnv) -> None:  # noqa: C901  the fire itself: its steps stay in one coroutine, no call or await added before the request
    """POST the payload; 2xx succeeds, anything else fails (3xx too: redirects are not followed). Transient
    failures are tried again while the occurrence may still start (``context.latest_start_ms``)."""
    url = str(action.url)
    rules = env.rules.of(context.task_id)  # the tenant of the task's key, whatever its item says
    engine = _engine(env, rules)
    try:
        target = engine.target(url)
    except TargetRefusedError as exc:
        raise ActionFailedError(f"target refused: {exc}") from None
    body = canonical_json(context.payload).encode()
    secret_headers = {name: await _secret_header(env, rules, name, ref) for name, ref in action.secret_headers.items()}
    headers = merge_headers(
        {"Content-Type": "application/json", "User-Agent": USER_AGENT},
        action.headers,
        secret_headers,
        {
            "Idempotency-Key": context.idempotency_key,
            "X-Punctual-Task-Id": context.task_id,
            "X-Punctual-Due-Ms": str(context.due_ms),
        },
    )
    signing = None
    if action.signing_secret is not None:
        try:
            signing = parse_signing_secrets(await _resolve(env, rules, action.signing_secret))
        except SigningSecretError as exc:
            raise ActionFailedError(f"signing secret {action.signing_secret}: {exc}") from None
    attempts = MAX_ATTEMPTS if action.retry_transient else 1
    for attempt in range(attempts):
        if signing is not None:
            headers = merge_headers(
                headers, signature_headers(signing, context.idempotency_key, int(time.time()), body)
            )
        try:
            status, _ = await engine.post(target, url, headers, body, action.timeout_s)
        except TransientActionError:
            if not _may_retry(attempt, attempts, context, action.timeout_s):
                raise
        else:
            if status in _SUCCESS:
                return
            error = f"HTTP {status} from {target.origin}"
            if is_transient_status(status):
                if not _may_retry(attempt, attempts, context, action.timeout_s):
                    raise TransientActionError(error)
            else:
                raise ActionFailedError(error + (" (redirects are not followed)" if status in _REDIRECT else ""))
        await asyncio.sleep(RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S) - 1)])


def _may_retry(attempt: int, attempts: int, context: FireContext, timeout_s: float) -> bool:
    """Another attempt is left, it would still start within the occurrence's grace, and it would end (its
    ``timeout_s`` at most) :data:`INVOCATION_MARGIN_MS` before the invocation does, leaving time to record."""
    if attempt + 1 >= attempts:
        return False
    start_ms = time.time() * 1000 + RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S) - 1)] * 1000
    if context.latest_start_ms is not None and start_ms > context.latest_start_ms:
        return False
    return context.deadline_ms is None or start_ms + timeout_s * 1000 <= context.deadline_ms - INVOCATION_MARGIN_MS


def prepare_http(fires: list[tuple[HttpAction, float, str]], env: ActionEnv) -> list[Warmup]:
    """Warm-ups for a batch's webhooks, ``fires`` being ``(action, seconds until due, task id)``: per tenant and
    target host, each
    run of fires due within :data:`TOGETHER_S` of its first is one warm-up of as many connections, at
    :data:`WARM_LEAD_S` before that first fire (and none for fires due sooner than :data:`WARM_MIN_S`: warming
    then would compete with them). A URL the rules refuse is skipped: its fire reports it."""
    by_host: dict[tuple[str | None, str, str, int], tuple[HttpEngine, Target, list[float]]] = {}
    for action, delay_s, task_id in fires:
        if delay_s < WARM_MIN_S:
            continue
        rules = env.rules.of(task_id)
        engine = _engine(env, rules)
        try:
            target = engine.target(str(action.url))
        except TargetRefusedError:
            continue
        key = (rules.tenant, target.scheme, target.host, target.port)
        by_host.setdefault(key, (engine, target, []))[2].append(delay_s)
    warmups: list[Warmup] = []
    for engine, target, delays in by_host.values():
        for first_s, count in warm_plan(delays):
            at = max(0.0, first_s - WARM_LEAD_S)
            warmups.append(Warmup(at, partial(engine.warm, target, count, first_s - at)))
    return warmups


def warm_plan(delays_s: list[float]) -> list[tuple[float, int]]:
    """Runs of fires to one host due together: ``(seconds until the first is due, how many)``, each run
    holding the fires due within :data:`TOGETHER_S` of its first."""
    runs: list[tuple[float, int]] = []
    for delay in sorted(delays_s):
        if runs and delay - runs[-1][0] <= TOGETHER_S:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((delay, 1))
    return runs


HTTP = ActionKind(model=HttpAction, run=run_http, max_timeout_s=60.0, check=check_http, prepare=prepare_http)
