"""The REST API on loopback: the same resolver as the API Lambda (:mod:`punctual.api`), behind a bearer token.

API Gateway authenticates a caller (SigV4) and hands the Lambda a proxy event; here :class:`LocalApi` does both:
it checks ``Authorization: Bearer <token>`` against its tokens (each names a tenant), turns the request into the
same REST proxy event, with the tenant as the authorizer's, and answers what the resolver answers. It listens on
127.0.0.1 only. ``punctual up`` writes its first token to ``<home>/api-token`` (mode 0600), for the tenant
``local``.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from punctual.api.app import PROBLEM, problem_json
from punctual.priority import lower_current_thread

log = logging.getLogger("punctual_tools.local.api")
MAX_BODY = 1024 * 1024  # API Gateway takes 10 MB; a task's item holds at most 400 KB
LOCAL_TENANT = "local"


def proxy_event(method: str, target: str, headers: dict[str, str], body: bytes | None,
                tenant: str | None) -> dict[str, Any]:
    """The API Gateway REST proxy event of a request (``target``: path and query, as on the request line)."""
    split = urlsplit(target)
    query = parse_qs(split.query, keep_blank_values=True)
    return {
        "resource": "/{proxy+}",
        "path": unquote(split.path),
        "httpMethod": method,
        "headers": dict(headers),
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": {k: v[-1] for k, v in query.items()} or None,
        "multiValueQueryStringParameters": query or None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {
            "requestId": str(uuid.uuid4()), "stage": "local", "httpMethod": method, "path": split.path,
            "identity": {"sourceIp": "127.0.0.1", "userArn": None},
            "authorizer": {"tenant": tenant} if tenant else None,
        },
        "body": None if body is None else body.decode("utf-8", errors="replace"),
        "isBase64Encoded": False,
    }


def problem(status: int, detail: str) -> tuple[int, dict[str, str], bytes]:
    """The server's own answer (before the resolver: authentication, size), in the API's problem format."""
    return status, {"Content-Type": PROBLEM}, problem_json(status, detail).encode()


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # connections waiting to be accepted (socketserver's default is 5): a client's pool


class LocalApi:
    """Serve the resolver ``resolver_factory()`` builds on ``127.0.0.1:port`` (0: any free port). ``tokens`` maps
    bearer tokens to tenants.

    One request is resolved at a time: Powertools keeps the request being answered in a class attribute
    (``BaseRouter.current_event``), shared by every resolver of the process, so two requests resolved at once
    could each be answered from the other's body. In Lambda a process answers one request at a time anyway.
    Connections are still served in parallel (reading and writing them)."""

    def __init__(self, resolver_factory: Callable[[], Any], tokens: dict[str, str], port: int = 0) -> None:
        self._resolver = resolver_factory()
        self._resolving = threading.Lock()
        self._tokens = dict(tokens)
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                lower_current_thread()  # serving the API is background work: firing comes first
                super().setup()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                log.debug("%s " + format, self.address_string(), *args)

            def _answer(self) -> None:
                status, headers, body = api.handle(self.command, self.path, dict(self.headers.items()), self.rfile)
                try:
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                    log.debug("%s left before its answer", self.address_string())  # what it asked was done

            def __getattr__(self, name: str) -> Any:
                # every method reaches the resolver (which answers a problem for one it does not route), as every
                # method reaches API Gateway: none is left to http.server's HTML 501
                if name.startswith("do_"):
                    return self._answer
                raise AttributeError(name)

        self._server = _Server(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add_token(self, tenant: str, token: str | None = None) -> str:
        """A new token for ``tenant`` (given, or a random one); returns it."""
        token = token or secrets.token_urlsafe(32)
        self._tokens[token] = tenant
        return token

    def tenant_of(self, authorization: str | None) -> str | None:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        found = None
        for known, tenant in self._tokens.items():  # every token compared, in constant time each
            if hmac.compare_digest(known.encode(), token.strip().encode()):
                found = tenant
        return found

    def handle(self, method: str, target: str, headers: dict[str, str], body_stream: Any,
               ) -> tuple[int, dict[str, str], bytes]:
        lowered = {k.lower(): v for k, v in headers.items()}
        tenant = self.tenant_of(lowered.get("authorization"))
        try:
            length = int(lowered.get("content-length") or 0)
        except ValueError:
            return problem(400, "bad Content-Length")
        if length > MAX_BODY:
            return problem(413, f"the body is larger than {MAX_BODY} bytes")
        body = body_stream.read(length) if length > 0 else None
        if tenant is None:
            return problem(401, "give the local API's token: Authorization: Bearer <token> (punctual up wrote it "
                                "to .punctual/api-token)")
        forwarded = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        event = proxy_event(method, target, forwarded, body, tenant)
        try:
            with self._resolving:
                response = self._resolver.resolve(event, None)
        except Exception:  # noqa: BLE001 - the caller gets an answer (API Gateway's would be a 502), the log the cause
            log.exception("the API failed on %s %s", method, urlsplit(target).path)
            return problem(500, "the API failed on this request; the local stack's log has the cause")
        out_headers = {k: str(v) for k, v in (response.get("headers") or {}).items()}
        for name, values in (response.get("multiValueHeaders") or {}).items():
            if values:
                out_headers[name] = str(values[-1])
        text = response.get("body") or ""
        return int(response["statusCode"]), out_headers, text.encode() if isinstance(text, str) else text

    def start(self) -> LocalApi:
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> LocalApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def write_token(path: Path, token: str) -> None:
    """Write ``token`` where only this user can read it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(token + "\n")
