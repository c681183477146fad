"""The API's resolver, and what a route reaches of the request it answers.

Routes live at module scope (:mod:`punctual.api.routes`); a request's dependencies (the client, the caller's
tenant) are the resolver's that answers it, reached through :func:`service` and :func:`current_event` while
:meth:`JsonResolver.resolve` runs.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.event_handler.router import APIGatewayRouter
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

from punctual.api.problems import PROBLEM, problem_json
from punctual.api.service import TenantService
from punctual.config.tenant_source import TenantMapSource
from punctual.domain.tenancy import is_tenant
from punctual.errors import NoTenantError
from punctual.scheduling.client import Client


def parse_body(text: str) -> Any:
    """A request body's JSON. Python refuses to read an integer of more digits than ``sys.get_int_max_str_digits()``
    with a ValueError that is no JSONDecodeError (so Powertools would let it escape as a 500): that is reported as
    the body's decoding error, a 400 naming the body."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        limit = sys.get_int_max_str_digits()
        raise json.JSONDecodeError(f"a number has more than {limit} digits", text, 0) from exc


class JsonResolver(APIGatewayRestResolver):
    """Powertools' REST resolver that takes request bodies as JSON only: another media type is a 415 problem
    before any parsing (Powertools would otherwise try forms and multipart, and fail on a malformed one with a
    500). ``client_factory`` gives the client a request goes through (once per request: a client is cheap; the
    store is shared by the factory) and ``tenants`` names the tenants of principals."""

    def __init__(self, client_factory: Callable[[], Client], tenants: TenantMapSource) -> None:
        super().__init__(enable_validation=True, strip_prefixes=None, json_body_deserializer=parse_body)
        self.client_factory = client_factory
        self.tenants = tenants

    def resolve(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        headers = {str(k).lower(): v for k, v in (event.get("headers") or {}).items()}
        media_type = str(headers.get("content-type") or "").split(";")[0].strip().lower()
        if event.get("body") and media_type and media_type != "application/json":
            body = problem_json(
                415, f"send the body as application/json, not {media_type[:100]}", "body", kind="invalid"
            )
            return {
                "statusCode": 415,
                "multiValueHeaders": {"Content-Type": [PROBLEM]},
                "body": body,
                "isBase64Encoded": False,
            }
        with _answering(self):
            return super().resolve(event, context)

    def tenant_service(self) -> TenantService:
        """The service of the current request's tenant: the authorizer's ``tenant`` (the local server's), else the
        tenant the map names for the caller's principal. Raises NoTenantError when there is none."""
        context = self.current_event.request_context
        authorizer = context.authorizer.raw_event if context.authorizer else {}
        tenant = authorizer.get("tenant") if isinstance(authorizer, dict) else None
        if not isinstance(tenant, str) or not tenant:
            tenant = self.tenants.tenant_map().tenant_of(context.identity.user_arn)
        if tenant is None or not is_tenant(tenant):
            raise NoTenantError()
        return TenantService(self.client_factory(), tenant)


_answering_now: ContextVar[JsonResolver] = ContextVar("punctual_api_resolver")


@contextmanager
def _answering(resolver: JsonResolver) -> Iterator[None]:
    token = _answering_now.set(resolver)
    try:
        yield
    finally:
        _answering_now.reset(token)


def service() -> TenantService:
    """The current request's :class:`~punctual.api.service.TenantService` (:meth:`JsonResolver.tenant_service`)."""
    return _answering_now.get().tenant_service()


def current_event() -> APIGatewayProxyEvent:
    """The request being answered."""
    return _answering_now.get().current_event


def new_router() -> APIGatewayRouter:
    """A router for a module of routes (Powertools' constructor is untyped)."""
    return APIGatewayRouter()  # type: ignore[no-untyped-call]
