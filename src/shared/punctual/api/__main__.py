"""Print the API's OpenAPI document: ``python -m punctual.api > openapi.json`` (``make openapi``)."""

from __future__ import annotations

from ..client import Client
from ..tenant_map import TenantMap
from .app import build_app, openapi_document


def _no_client() -> Client:
    raise RuntimeError("the document is generated without a store")


print(openapi_document(build_app(_no_client, TenantMap())), end="")
