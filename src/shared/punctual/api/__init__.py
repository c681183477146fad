"""The REST API: views, the tenant-scoped service, and the Powertools resolver."""

from .app import build_app, openapi_document
from .service import TenantService

__all__ = ["TenantService", "build_app", "openapi_document"]
