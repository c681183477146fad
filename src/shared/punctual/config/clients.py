"""boto3 clients, built from :class:`Settings`: AWS itself, or a local endpoint such as DynamoDB Local.

Each builder's return is typed with the service's stubs (``mypy_boto3_*``), named under ``TYPE_CHECKING`` only: the
Lambda layer does not ship them, and no handler imports them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, overload

import boto3
from botocore.config import Config

from punctual.config.settings import Settings

if TYPE_CHECKING:
    from botocore.client import BaseClient
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_ssm import SSMClient

_CONFIG = Config(
    retries={"max_attempts": 8, "mode": "standard"}, connect_timeout=5, read_timeout=30, max_pool_connections=64
)
LOCAL_CREDENTIALS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}


@overload
def aws_client(
    service: Literal["dynamodb"], endpoint_url: str | None, region: str, config: Config | None = None
) -> DynamoDBClient: ...
@overload
def aws_client(
    service: Literal["dynamodbstreams"], endpoint_url: str | None, region: str, config: Config | None = None
) -> DynamoDBStreamsClient: ...
@overload
def aws_client(
    service: Literal["lambda"], endpoint_url: str | None, region: str, config: Config | None = None
) -> LambdaClient: ...
@overload
def aws_client(
    service: Literal["sqs"], endpoint_url: str | None, region: str, config: Config | None = None
) -> SQSClient: ...
@overload
def aws_client(
    service: Literal["sns"], endpoint_url: str | None, region: str, config: Config | None = None
) -> SNSClient: ...
@overload
def aws_client(
    service: Literal["events"], endpoint_url: str | None, region: str, config: Config | None = None
) -> EventBridgeClient: ...
@overload
def aws_client(
    service: Literal["ssm"], endpoint_url: str | None, region: str, config: Config | None = None
) -> SSMClient: ...
@overload
def aws_client(
    service: Literal["secretsmanager"], endpoint_url: str | None, region: str, config: Config | None = None
) -> SecretsManagerClient: ...
@overload
def aws_client(service: str, endpoint_url: str | None, region: str, config: Config | None = None) -> BaseClient: ...
def aws_client(service: str, endpoint_url: str | None, region: str, config: Config | None = None) -> BaseClient:
    """A client of ``service``: standard retries (8 attempts), 5/30 s timeouts, 64 pooled connections (the
    worker threads share it). With ``endpoint_url`` it signs with dummy credentials (DynamoDB Local accepts
    any). Each client comes from its own session: creating clients from the default session is not
    thread-safe. ``config`` is merged over those defaults. Typed by the service's stubs for the services named
    above, as a plain ``BaseClient`` for any other."""
    session = boto3.session.Session()
    # boto3's stubs type ``client`` per service name; a name known only at run time makes a client all the same
    make: Callable[..., BaseClient] = session.client
    merged = _CONFIG if config is None else _CONFIG.merge(config)
    if endpoint_url is None:
        return make(service, region_name=region, config=merged)
    return make(
        service,
        region_name=region,
        endpoint_url=endpoint_url,
        config=merged,
        aws_access_key_id=LOCAL_CREDENTIALS["aws_access_key_id"],
        aws_secret_access_key=LOCAL_CREDENTIALS["aws_secret_access_key"],
    )


def dynamodb_client(endpoint_url: str | None, region: str) -> DynamoDBClient:
    """A DynamoDB client (see :func:`aws_client`), without botocore's client-side parameter validation:
    DynamoDB validates every request itself (a ``ValidationException``), and botocore's walk over every key of
    every BatchGetItem was a large share of a poll's CPU (docs/decisions.md). What users hand the client is validated by
    the models before any request is built."""
    return aws_client("dynamodb", endpoint_url, region, Config(parameter_validation=False))


def make_dynamodb_client(settings: Settings) -> DynamoDBClient:
    """The DynamoDB client for these settings (AWS, or ``settings.endpoint_url``)."""
    return dynamodb_client(settings.endpoint_url, settings.region)


def make_ssm_client(settings: Settings) -> SSMClient:
    """The SSM client that reads the tenant map (``settings.tenant_map_parameter``) in AWS (``endpoint_url`` is
    DynamoDB's). Short timeouts and three attempts: an executor reads the map before it arms a batch, so a slow
    Parameter Store must cost the batch little (a failed read keeps the map read before)."""
    config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=2, read_timeout=5)
    return aws_client("ssm", None, settings.region, config)
