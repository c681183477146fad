"""boto3 clients built from :class:`Settings` (AWS itself, or a local endpoint such as DynamoDB Local)."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config

from .settings import Settings

_CONFIG = Config(retries={"max_attempts": 8, "mode": "standard"}, connect_timeout=5, read_timeout=30,
                 max_pool_connections=64)


def make_dynamodb_client(settings: Settings) -> Any:
    """A DynamoDB client; with ``endpoint_url`` set, bound to it with dummy credentials (DynamoDB Local)."""
    if settings.endpoint_url:
        return boto3.client("dynamodb", endpoint_url=settings.endpoint_url, region_name=settings.region,
                            aws_access_key_id="local", aws_secret_access_key="local", config=_CONFIG)
    return boto3.client("dynamodb", region_name=settings.region, config=_CONFIG)
