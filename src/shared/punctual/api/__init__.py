"""The REST API: views, the tenant-scoped service, and the Powertools resolver."""

from punctual.api.app import build_app, openapi_document
from punctual.api.service import TenantService

__all__ = ["TenantService", "build_app", "openapi_document"]
