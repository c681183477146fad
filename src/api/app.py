"""API Lambda, behind API Gateway (REST, IAM auth): the resolver of :mod:`punctual.api`.

A thin adapter: the caller's principal (``requestContext.identity.userArn``, set by API Gateway after it checked
the SigV4 signature) is mapped to a tenant by the tenant map (``PUNCTUAL_TENANT_MAP``, or the Parameter Store
parameter ``PUNCTUAL_TENANT_MAP_PARAMETER`` names, read at the cold start and again once older than
``PUNCTUAL_TENANT_MAP_CACHE_S``); every operation is scoped to it. Logs are JSON (Powertools) with the request id
as correlation id; the request body is never logged.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from punctual.config.settings import Settings
from punctual.runtime.observability import handler_tools
from punctual.runtime.wiring import build_api

logger, metrics = handler_tools()
settings = Settings.from_env()
app = build_api(settings)


@logger.inject_lambda_context(log_event=False, correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
