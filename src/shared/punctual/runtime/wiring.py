"""Wiring: build the services from :class:`Settings` (what the Lambda handlers and the local runtime share): the
store's parts (:class:`~punctual.stores.dynamodb.DynamoStores`), and each service handed the ports it uses.

Building has no process-wide effect: CPU confinement and the fire log are the local runtime's business
(``punctual_tools.local.worker``), the GIL switch interval the executor handler's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import boto3

from punctual.config.cpu_share import detect_cpu_share
from punctual.config.settings import Settings
from punctual.config.tenant_map import TenantMap
from punctual.config.tenant_source import TenantMapSource, tenant_map_source
from punctual.domain.clock import SystemClock
from punctual.domain.tenancy import split
from punctual.executing.executor import Executor
from punctual.runtime.ntp import offset_probe
from punctual.stores.dlq import build_dead_letter_queue
from punctual.stores.dynamodb import build_stores
from punctual.stores.dynamodb.codec import candidate_of_item
from punctual.stores.ports import Stores
from punctual.targets import ActionEnv

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import APIGatewayRestResolver
    from botocore.client import BaseClient
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_ssm import SSMClient

    from punctual.polling.invoker import Invoker
    from punctual.polling.poller import Poller
    from punctual.scheduling.quotas import TenantAdmission

# How the fast path reads a stream record's image (:func:`punctual.polling.fastpath.dispatch_stream_records`): the
# store's adapter decodes its own items.
decode_stream_image = candidate_of_item


def poller_on(
    stores: Stores,
    invoker: Invoker,
    settings: Settings,
    poller_id: str | None = None,
    admit: TenantAdmission | None = None,
) -> Poller:
    """The poller on ``stores``' ports: the due index it reads, the schedules it extends and their tasks."""
    from punctual.polling.poller import Poller  # noqa: PLC0415  imported on first use: keeps the executor handler's cold start free of the polling package

    return Poller(stores.dispatch, stores.schedules, stores.client, invoker, settings, poller_id=poller_id, admit=admit)


def build_poller(  # noqa: PLR0913  the settings; every dependency keyword-only, made when not handed in
    settings: Settings,
    *,
    invoker: Invoker | None = None,
    dynamodb: DynamoDBClient | None = None,
    lambda_client: LambdaClient | None = None,
    poller_id: str | None = None,
    ssm_client: SSMClient | None = None,
) -> Poller:
    """The poller; without an ``invoker``, Lambda async invoke of ``settings.executor_function``. The polling
    package (and the schedules' chain it extends) is loaded here: the executor's cold start never needs it. The
    occurrences it makes are admitted against their tenants' ``active_tasks`` quota, from the tenant map
    ``settings`` name (``ssm_client`` reads a parameter: one is made when None)."""
    from punctual.polling.invoker import LambdaInvoker  # noqa: PLC0415  imported on first use: keeps the executor handler's cold start free of the polling package
    from punctual.scheduling.quotas import QuotaGuard, TenantAdmission  # noqa: PLC0415  imported on first use: keeps the executor handler's cold start free of the quotas

    if invoker is None:
        if lambda_client is None:
            lambda_client = boto3.client("lambda", region_name=settings.region)
        invoker = LambdaInvoker(lambda_client, settings.executor_function)
    stores = build_stores(settings, dynamodb)
    tenants = _tenant_map_when_needed(settings, ssm_client)
    admit = TenantAdmission(
        QuotaGuard(stores.client), lambda task_id: tenants().policy_of(split(task_id)[0] or "").quotas
    )
    return poller_on(stores, invoker, settings, poller_id, admit)


def _tenant_map_when_needed(settings: Settings, ssm_client: SSMClient | None) -> Callable[[], TenantMap]:
    """The tenant map ``settings`` name, its source made at the first call: a map that cannot be read fails the
    schedules whose occurrences need it (each logged, tried again at the next tick), never a poll's tasks."""
    sources: list[TenantMapSource] = []
    lock = threading.Lock()

    def tenant_map() -> TenantMap:
        with lock:
            if not sources:
                sources.append(tenant_map_source(settings, ssm_client))
        return sources[0].tenant_map()

    return tenant_map


def build_executor(
    settings: Settings,
    dynamodb: DynamoDBClient | None = None,
    sqs_client: SQSClient | None = None,
    action_clients: dict[str, BaseClient] | None = None,
    ssm_client: SSMClient | None = None,
) -> Executor:
    """The executor; starts the once-per-cold-start NTP offset measurement in the background. Its dead-letter
    queue is the one ``dead_letter_queue_url`` names (SQS, or a local ``file://``), if any; its actions use
    the target rules of ``settings`` and ``action_clients`` (boto3 clients by service name; others are made
    when first needed), and the tenant map it names (``ssm_client`` reads a parameter: one is made when None;
    a map that cannot be read fails here). It fires as the CPU share this process may use allows
    (:func:`detect_cpu_share`)."""
    tenants = tenant_map_source(settings, ssm_client)
    return Executor(
        build_stores(settings, dynamodb).firing,
        settings,
        SystemClock(),
        offset_probe(settings.ntp_server, settings.ntp_timeout_s),
        dead_letters=build_dead_letter_queue(settings, sqs_client),
        actions=ActionEnv.from_settings(settings, action_clients, tenants),
        cpu_share=detect_cpu_share(),
    )


def build_api(
    settings: Settings, dynamodb: DynamoDBClient | None = None, ssm_client: SSMClient | None = None
) -> APIGatewayRestResolver:
    """The REST API's resolver (:mod:`punctual.api`): one store, a client per request over it, the tenant map
    ``settings`` name (``ssm_client`` reads a parameter: one is made when None; a map that cannot be read fails
    here). Not thread-safe (the resolver holds the request it is answering): one per thread."""
    from punctual.api import build_app  # noqa: PLC0415  imported on first use: keeps the other handlers' cold starts free of the API
    from punctual.runtime.client import Client  # noqa: PLC0415  imported on first use: keeps the other handlers' cold starts free of the client
    from punctual.scheduling.quotas import QuotaGuard  # noqa: PLC0415  imported on first use: keeps the executor handler's cold start free of quotas

    tenants = tenant_map_source(settings, ssm_client)
    stores = build_stores(settings, dynamodb)
    quota = QuotaGuard(stores.client)  # one per process: its requests' creates are admitted together, exactly
    return build_app(lambda: Client(settings, stores=stores, tenant_map=tenants.tenant_map(), quota=quota), tenants)
