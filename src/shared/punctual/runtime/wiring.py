"""Wiring: build the services from :class:`Settings` (what the Lambda handlers and the local runtime share).

Building has no process-wide effect: CPU confinement and the fire log are the local runtime's business
(``punctual_tools.local.worker``), the GIL switch interval the executor handler's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from punctual.config.cpu_share import detect_cpu_share
from punctual.config.settings import Settings
from punctual.config.tenant_source import tenant_map_source
from punctual.domain.clock import SystemClock, offset_probe
from punctual.executing.executor import Executor
from punctual.stores.dlq import build_dead_letter_queue
from punctual.stores.dynamodb import build_store
from punctual.targets import ActionEnv

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import APIGatewayRestResolver

    from punctual.polling.invoker import Invoker
    from punctual.polling.poller import Poller


def build_poller(
    settings: Settings,
    invoker: Invoker | None = None,
    dynamodb: Any = None,
    lambda_client: Any = None,
    poller_id: str | None = None,
) -> Poller:
    """The poller; without an ``invoker``, Lambda async invoke of ``settings.executor_function``. The polling
    package (and the schedules' chain it extends) is loaded here: the executor's cold start never needs it."""
    from punctual.polling.invoker import LambdaInvoker
    from punctual.polling.poller import Poller

    if invoker is None:
        if lambda_client is None:
            import boto3

            lambda_client = boto3.client("lambda", region_name=settings.region)
        invoker = LambdaInvoker(lambda_client, settings.executor_function)
    return Poller(build_store(settings, dynamodb), invoker, settings, poller_id)


def build_executor(
    settings: Settings,
    dynamodb: Any = None,
    sqs_client: Any = None,
    action_clients: dict[str, Any] | None = None,
    ssm_client: Any = None,
) -> Executor:
    """The executor; starts the once-per-cold-start NTP offset measurement in the background. Its dead-letter
    queue is the one ``dead_letter_queue_url`` names (SQS, or a local ``file://``), if any; its actions use
    the target rules of ``settings`` and ``action_clients`` (boto3 clients by service name; others are made
    when first needed), and the tenant map it names (``ssm_client`` reads a parameter: one is made when None;
    a map that cannot be read fails here). It fires as the CPU share this process may use allows
    (:func:`detect_cpu_share`)."""
    tenants = tenant_map_source(settings, ssm_client)
    return Executor(
        build_store(settings, dynamodb),
        settings,
        SystemClock(),
        offset_probe(settings.ntp_server, settings.ntp_timeout_s),
        dead_letters=build_dead_letter_queue(settings, sqs_client),
        actions=ActionEnv.from_settings(settings, action_clients, tenants),
        cpu_share=detect_cpu_share(),
    )


def build_api(settings: Settings, dynamodb: Any = None, ssm_client: Any = None) -> APIGatewayRestResolver:
    """The REST API's resolver (:mod:`punctual.api`): one store, a client per request over it, the tenant map
    ``settings`` name (``ssm_client`` reads a parameter: one is made when None; a map that cannot be read fails
    here). Not thread-safe (the resolver holds the request it is answering): one per thread."""
    from punctual.api import build_app  # here: only the API's function loads the API, its client and tenant map
    from punctual.scheduling.client import Client

    tenants = tenant_map_source(settings, ssm_client)
    store = build_store(settings, dynamodb)
    return build_app(lambda: Client(settings, store=store, tenant_map=tenants.tenant_map()), tenants)
