"""The API's routes are module-level routers shared by every resolver built: each resolver answers with its own
client and tenant map, whichever was built last."""

from __future__ import annotations

import json

import pytest

from punctual.api import build_app
from punctual.api.resolver import service
from punctual.config.tenant_map import TenantMap
from punctual.errors import TaskNotFoundError
from punctual.scheduling.client import Client
from punctual_tools.local.api_server import proxy_event


def _client_of(name: str) -> Client:
    """A client factory's stand-in that names the resolver it belongs to (as a 404 problem's detail)."""
    raise TaskNotFoundError(name)


def test_each_resolver_answers_with_its_own_client() -> None:
    # Given two resolvers over the same routes, each with its own client factory, built one after the other
    first = build_app(lambda: _client_of("first"), TenantMap())
    second = build_app(lambda: _client_of("second"), TenantMap())
    # When each answers a request
    answers = {
        name: app.resolve(proxy_event("GET", "/v1/tasks/t-1", {}, None, "acme"), None)  # type: ignore[arg-type]  # reads no context
        for name, app in (("first", first), ("second", second))
    }
    # Then each went through its own client
    for name, answer in answers.items():
        assert answer["statusCode"] == 404
        assert name in json.loads(answer["body"])["detail"]


def test_a_route_outside_a_request_is_refused_without_a_resolver() -> None:
    # Given no request being answered  When a route's dependencies are asked for  Then there is no resolver to ask
    with pytest.raises(LookupError):
        service()
