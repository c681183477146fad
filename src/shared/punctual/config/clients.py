"""boto3 clients, built from :class:`Settings`: AWS itself, or a local endpoint such as DynamoDB Local."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config

from punctual.config.settings import Settings

_CONFIG = Config(
    retries={"max_attempts": 8, "mode": "standard"}, connect_timeout=5, read_timeout=30, max_pool_connections=64
)
LOCAL_CREDENTIALS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}


def aws_client(service: Any, endpoint_url: str | None, region: str, config: Config | None = None) -> Any:
    """A client of ``service``: standard retries (8 attempts), 5/30 s timeouts, 64 pooled connections (the
    worker threads share it). With ``endpoint_url`` it signs with dummy credentials (DynamoDB Local accepts
    any). Each client comes from its own session: creating clients from the default session is not
    thread-safe. ``config`` is merged over those defaults."""
    session = boto3.session.Session()
    merged = _CONFIG if config is None else _CONFIG.merge(config)
    if endpoint_url is None:
        return session.client(service, region_name=region, config=merged)
    return session.client(
        service,
        region_name=region,
        endpoint_url=endpoint_url,
        config=merged,
        aws_access_key_id=LOCAL_CREDENTIALS["aws_access_key_id"],
        aws_secret_access_key=LOCAL_CREDENTIALS["aws_secret_access_key"],
    )


def dynamodb_client(endpoint_url: str | None, region: str) -> Any:
    """A DynamoDB client (see :func:`aws_client`), without botocore's client-side parameter validation:
    DynamoDB validates every request itself (a ``ValidationException``), and botocore's walk over every key of
    every BatchGetItem was a large share of a poll's CPU (docs/decisions.md). What users hand the client is validated by
    the models before any request is built."""
    return aws_client("dynamodb", endpoint_url, region, Config(parameter_validation=False))


def make_dynamodb_client(settings: Settings) -> Any:
    """The DynamoDB client for these settings (AWS, or ``settings.endpoint_url``)."""
    return dynamodb_client(settings.endpoint_url, settings.region)


def make_ssm_client(settings: Settings) -> Any:
    """The SSM client that reads the tenant map (``settings.tenant_map_parameter``) in AWS (``endpoint_url`` is
    DynamoDB's). Short timeouts and three attempts: an executor reads the map before it arms a batch, so a slow
    Parameter Store must cost the batch little (a failed read keeps the map read before)."""
    config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=2, read_timeout=5)
    return aws_client("ssm", None, settings.region, config)
