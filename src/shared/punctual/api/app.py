"""The REST API: Powertools' REST resolver over :class:`~punctual.api.service.TenantService`.

The same resolver serves API Gateway (IAM / SigV4 authentication: the caller's tenant comes from its principal
through the tenant map) and the local runtime's loopback server (a bearer token, mapped to a tenant by the server
itself, passed as the authorizer's ``tenant``). Bad input is a 4xx problem-details answer naming the field,
never a 5xx; an unknown or other tenant's id is 404 whatever the operation. The routes are the routers of
:mod:`punctual.api.routes`; the answers to errors are this module's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)

from punctual.api.problems import PROBLEM, problem_answer
from punctual.api.resolver import JsonResolver, current_event
from punctual.api.routes import ROUTERS
from punctual.api.views import validation_problem
from punctual.config.tenant_map import TenantMap
from punctual.config.tenant_source import FixedTenantMap, TenantMapSource
from punctual.errors import (
    ConflictError,
    InvalidRequestError,
    NoTenantError,
    NotFoundError,
    QuotaExceededError,
    RequestTooLargeError,
    StateError,
    UndecodableItemError,
)
from punctual.scheduling.client import Client

log = logging.getLogger("punctual.api")
TITLE = "Punctual"
VERSION = "1"

E = TypeVar("E", bound=Exception)
Handler = Callable[[E], Response[str]]


def invalid(exc: RequestValidationError) -> Response[str]:
    """A body that is no JSON is a 400; a request that does not fit its schema a 422 naming each field."""
    errors = list(exc.errors())
    for error in errors:
        if error.get("type") == "json_invalid":
            why = (error.get("ctx") or {}).get("error")
            return problem_answer(
                400, f"the body is not JSON ({why})" if why else "the body is not JSON", "body", kind="invalid"
            )
    problem = validation_problem(errors)
    return Response(status_code=422, content_type=PROBLEM, body=problem.model_dump_json(exclude_none=True))


def media_type(exc: RequestUnsupportedContentType) -> Response[str]:
    return problem_answer(415, "send the body as application/json", "body", kind="invalid")


def too_deep(exc: RecursionError) -> Response[str]:
    return problem_answer(400, "the body is nested too deeply to be read", "body", kind="invalid")


def bad_request(exc: InvalidRequestError) -> Response[str]:
    """A bad task, schedule or query parameter alike."""
    return problem_answer(422, str(exc), exc.field, kind="invalid")


def too_large(exc: RequestTooLargeError) -> Response[str]:
    return problem_answer(413, str(exc), exc.field, kind="invalid")


def over_quota(exc: QuotaExceededError) -> Response[str]:
    return problem_answer(429, str(exc), exc.field, kind="quota", quota=exc.quota)


def not_found(exc: NotFoundError) -> Response[str]:
    return problem_answer(404, str(exc), kind="not-found")


def conflict(exc: ConflictError) -> Response[str]:
    return problem_answer(409, str(exc), kind="conflict")


def wrong_state(exc: StateError) -> Response[str]:
    return problem_answer(409, str(exc), kind="state")


def unreadable(exc: UndecodableItemError) -> Response[str]:
    """An item under the caller's own key that is no readable task or schedule (written by hand, or forged to name
    another tenant's): refused as it is, never acted on."""
    return problem_answer(409, f"{exc}"[:500], kind="state")


def forbidden(exc: NoTenantError) -> Response[str]:
    return problem_answer(403, str(exc), kind="forbidden")


def no_route(exc: Exception) -> Response[str]:
    event = current_event()
    return problem_answer(404, f"no such resource: {event.http_method} {event.path}")


def unexpected(exc: Exception) -> Response[str]:
    event = current_event()
    log.exception("unexpected error in %s %s", event.http_method, event.path)
    return problem_answer(500, f"internal error ({type(exc).__name__}); the request may be retried")


HANDLERS: tuple[tuple[type[Exception], Handler[Any]], ...] = (
    (RequestValidationError, invalid),
    (RequestUnsupportedContentType, media_type),
    (RecursionError, too_deep),
    (InvalidRequestError, bad_request),
    (RequestTooLargeError, too_large),
    (QuotaExceededError, over_quota),
    (NotFoundError, not_found),
    (ConflictError, conflict),
    (StateError, wrong_state),
    (UndecodableItemError, unreadable),
    (NoTenantError, forbidden),
    (Exception, unexpected),
)
"""Each error's answer; Powertools picks the handler of the error's nearest class."""


def build_app(client_factory: Callable[[], Client], tenant_map: TenantMap | TenantMapSource) -> APIGatewayRestResolver:
    """The resolver, with ``client_factory`` giving the client its operations go through (once per request: a
    client is cheap; the store is shared by the factory) and ``tenant_map`` naming the tenants of principals: a
    map, or the source asked for it at each request (which reads it again once its copy is old)."""
    tenants = FixedTenantMap(tenant_map) if isinstance(tenant_map, TenantMap) else tenant_map
    app = JsonResolver(client_factory, tenants)
    for kind, handler in HANDLERS:
        app.exception_handler(kind)(handler)
    app.not_found(no_route)
    for router in ROUTERS:
        app.include_router(router)
    return app


def openapi_document(app: APIGatewayRestResolver) -> str:
    """The OpenAPI document of ``app``, as committed (``openapi.json``): stable key order, a final newline."""
    from aws_lambda_powertools.event_handler.openapi.models import (  # noqa: PLC0415  only the tooling writes the document: the API handler's cold start never loads these
        APIKey,
        APIKeyIn,
        HTTPBearer,
    )

    schemes: dict[str, Any] = {
        # API Gateway's IAM authorization: a SigV4 signature (service execute-api) in the Authorization header
        "sigv4": APIKey(
            name="Authorization",
            in_=APIKeyIn.header,
            description="AWS: a SigV4 signature (service execute-api) of an IAM principal that the tenant map names",
        ),
        "localToken": HTTPBearer(description="the local runtime: the token punctual up writes to .punctual/api-token"),
    }
    schema = json.loads(
        app.get_openapi_json_schema(
            title=TITLE,
            version=VERSION,
            description=(
                "Schedule tasks to fire at an exact instant. Every call is authenticated (AWS: IAM, SigV4; locally: a "
                "bearer token) and scoped to the caller's tenant: another tenant's task or schedule is not found."
            ),
            security_schemes=schemes,
            security=[{"sigv4": []}, {"localToken": []}],
        )
    )
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
