"""Print the API's OpenAPI document: ``python -m punctual.api > openapi.json`` (``make openapi``)."""

from __future__ import annotations

from punctual.api.app import build_app, openapi_document
from punctual.config.tenant_map import TenantMap
from punctual.scheduling.client import Client


def _no_client() -> Client:
    raise RuntimeError("the document is generated without a store")


print(openapi_document(build_app(_no_client, TenantMap())), end="")
