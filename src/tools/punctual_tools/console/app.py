"""The console's web app (Flask): server-rendered pages over a :class:`~punctual_tools.console.model.ConsoleSource`.

Every request needs the console's token: a first visit with ``?token=<token>`` sets it in an HttpOnly, SameSite=Strict
cookie and redirects to the same address without it; without it (or with a wrong one) the answer is a 401 page
saying where the token is. Every change is a POST carrying a CSRF token (an HMAC of the console's token under a key
this process drew), reached through a confirmation page (:mod:`punctual_tools.console.changes`); a read-only console
shows no change and refuses every POST (403). An error of :mod:`punctual.errors` gets the status and message the REST
API answers it with (:func:`problem_of`, from the API's own handlers), and changes nothing. Pages allow scripts and
styles from the console itself only (Content-Security-Policy), and no framing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import urlencode

from flask import Flask, redirect, render_template, request
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

from punctual.api.app import HANDLERS
from punctual.errors import ApiError, PunctualError
from punctual_tools.console import changes, pages
from punctual_tools.console.context import EXTENSION, Console, console, show_instant, show_ms, show_tenant, show_zoned
from punctual_tools.console.model import ConsoleSource

log = logging.getLogger("punctual.console")

COOKIE = "punctual_console"
CSRF_FIELD = "csrf"
DEFAULT_TOKEN_HINT = "the token punctual console printed with its address"
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # the first visit's address holds the token
    "Cache-Control": "no-store",
}
MAX_FORM_BYTES = 1_000_000


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def create_app(
    source: ConsoleSource,
    *,
    token: str,
    read_only: bool = False,
    clock: Callable[[], int] | None = None,
    token_hint: str = DEFAULT_TOKEN_HINT,
) -> Flask:
    """The console over ``source``, open to whoever holds ``token`` (``token_hint`` says where it is, on the 401
    page); ``read_only``: no change shown, every POST refused; ``clock``: epoch milliseconds (default: the wall
    clock)."""
    if not token:
        raise ValueError("the console needs a token")
    key = secrets.token_bytes(32)
    app = Flask(__name__)
    app.secret_key = key  # signs the cookie that carries a change's message to the page it redirects to
    app.config.update(
        SESSION_COOKIE_NAME=f"{COOKIE}_message",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        MAX_CONTENT_LENGTH=MAX_FORM_BYTES,
    )
    app.jinja_env.autoescape = True
    app.jinja_env.trim_blocks = True
    app.jinja_env.lstrip_blocks = True
    app.jinja_env.filters.update(instant=show_instant, zoned=show_zoned, ms=show_ms, tenant=show_tenant)
    app.extensions[EXTENSION] = Console(
        source=source,
        read_only=read_only,
        clock=clock or wall_clock_ms,
        token=token,
        token_hint=token_hint,
        csrf_token=hmac.new(key, b"csrf:" + token.encode(), hashlib.sha256).hexdigest(),
    )
    app.before_request(guard)
    app.after_request(secure)
    app.context_processor(page_context)
    app.register_error_handler(PunctualError, show_error)
    app.register_error_handler(HTTPException, show_http_error)
    app.register_blueprint(pages.blueprint)
    app.register_blueprint(changes.blueprint)
    return app


def guard() -> ResponseReturnValue | None:
    """The token, on every request; the mode and the CSRF token, on every POST."""
    state = console()
    given = request.args.get("token")
    if given is not None:
        if not state.token_matches(given):
            return refuse(401, "this is not the console's token")
        rest = urlencode([(k, v) for k, v in request.args.items(multi=True) if k != "token"])
        answer = redirect(request.path + (f"?{rest}" if rest else ""), 303)
        answer.set_cookie(COOKIE, state.token, httponly=True, samesite="Strict", path="/")
        return answer
    if not state.token_matches(request.cookies.get(COOKIE)):
        return refuse(401, "this page needs the console's token")
    if request.method == "POST":
        if state.read_only:
            return refuse(403, "this console is read-only: it changes nothing")
        if not state.csrf_matches(request.form.get(CSRF_FIELD)):
            return refuse(403, "the form's CSRF token is missing or wrong: nothing was changed")
    return None


def refuse(status: int, message: str) -> ResponseReturnValue:
    """An error page; a 401's shows nothing of the source, only where the token is."""
    unknown = status == HTTPStatus.UNAUTHORIZED  # no nav, no label for a caller without the token
    hint = console().token_hint if unknown else None
    return render_template("error.html", status=status, message=message, hint=hint, bare=unknown), status


def secure(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    return response


def page_context() -> dict[str, Any]:
    state = console()
    return {
        "label": state.source.label,
        "read_only": state.read_only,
        "csrf_field": CSRF_FIELD,
        "csrf_token": state.csrf_token,
        "bare": False,
    }


def problem_of(error: PunctualError) -> tuple[int, str]:
    """The status and message the REST API answers ``error`` with: its handler's (:data:`punctual.api.app.HANDLERS`,
    the one of the error's nearest class); an API's refusal relayed keeps its status; anything else is a 500."""
    handlers = {kind: handler for kind, handler in HANDLERS if kind is not Exception}
    for kind in type(error).__mro__:
        handler = handlers.get(kind)
        if handler is not None:
            answer = handler(error)
            return answer.status_code, str(json.loads(answer.body or "{}").get("detail", error))
    if isinstance(error, ApiError):
        return (error.status if error.status >= HTTPStatus.BAD_REQUEST else int(HTTPStatus.BAD_GATEWAY)), str(error)
    return int(HTTPStatus.INTERNAL_SERVER_ERROR), f"internal error ({type(error).__name__}): {error}"


def show_error(error: PunctualError) -> ResponseReturnValue:
    status, message = problem_of(error)
    if status >= HTTPStatus.INTERNAL_SERVER_ERROR:  # a server error is logged with its trace
        log.error("console: %s %s", request.method, request.path, exc_info=error)
    return render_template("error.html", status=status, message=message), status


def show_http_error(error: HTTPException) -> ResponseReturnValue:
    status = error.code or 500
    return render_template("error.html", status=status, message=error.description), status
