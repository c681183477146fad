"""Wiring: build the services from :class:`Settings` (what the Lambda handlers and the local runtime share).

Building has no process-wide effect: CPU confinement and the fire log are the local runtime's business
(``punctual_tools.local.worker``), the GIL switch interval the executor handler's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from punctual.config.cpu_share import detect_cpu_share
from punctual.config.settings import Settings
from punctual.domain.clock import SystemClock, offset_probe
from punctual.executing.executor import Executor
from punctual.polling.invoker import Invoker, LambdaInvoker
from punctual.polling.poller import Poller
from punctual.stores.dlq import build_dead_letter_queue
from punctual.stores.dynamodb import build_store
from punctual.targets import ActionEnv

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import APIGatewayRestResolver


def build_poller(
    settings: Settings,
    invoker: Invoker | None = None,
    dynamodb: Any = None,
    lambda_client: Any = None,
    poller_id: str | None = None,
) -> Poller:
    """The poller; without an ``invoker``, Lambda async invoke of ``settings.executor_function``."""
    if invoker is None:
        if lambda_client is None:
            import boto3

            lambda_client = boto3.client("lambda", region_name=settings.region)
        invoker = LambdaInvoker(lambda_client, settings.executor_function)
    return Poller(build_store(settings, dynamodb), invoker, settings, poller_id)


def build_executor(
    settings: Settings, dynamodb: Any = None, sqs_client: Any = None, action_clients: dict[str, Any] | None = None
) -> Executor:
    """The executor; starts the once-per-cold-start NTP offset measurement in the background. Its dead-letter
    queue is the one ``dead_letter_queue_url`` names (SQS, or a local ``file://``), if any; its actions use
    the target rules of ``settings`` and ``action_clients`` (boto3 clients by service name; others are made
    when first needed). It fires as the CPU share this process may use allows (:func:`detect_cpu_share`)."""
    return Executor(
        build_store(settings, dynamodb),
        settings,
        SystemClock(),
        offset_probe(settings.ntp_server, settings.ntp_timeout_s),
        dead_letters=build_dead_letter_queue(settings, sqs_client),
        actions=ActionEnv.from_settings(settings, action_clients),
        cpu_share=detect_cpu_share(),
    )


def build_api(settings: Settings, dynamodb: Any = None) -> APIGatewayRestResolver:
    """The REST API's resolver (:mod:`punctual.api`): one store, a client per request over it, the tenant map of
    ``settings``. Not thread-safe (the resolver holds the request it is answering): one per thread."""
    from punctual.api import build_app  # here: only the API's function loads the API, its client and tenant map
    from punctual.config.tenant_map import TenantMap
    from punctual.scheduling.client import Client

    store = build_store(settings, dynamodb)
    return build_app(lambda: Client(settings, store=store), TenantMap.parse(settings.tenant_map))
