"""Tools of the hostile-tenant suite (test_hostile_tenants.py): two tenants' configuration, items written as a
tenant's direct-table role may write them, AWS clients that record every call, and a poll-and-fire round on
moto.

The tenants: ``acme`` attacks, ``beta`` is attacked. Each has a loopback receiver in its ``targets`` (its port
only), its own ARNs, its own secrets; the operator (tasks without a tenant) has ARNs and secrets of its own too.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from punctual.config.settings import Settings
from punctual.domain.clock import SystemClock
from punctual.domain.events import BatchReport, PollReport
from punctual.domain.keys import from_ms
from punctual.domain.model import canonical_json
from punctual.runtime.client import Client
from punctual.runtime.wiring import poller_on
from punctual.stores.dynamodb import DynamoStores
from punctual.targets import ActionEnv, TargetRules
from punctual.targets.secrets import SecretResolver
from support import RecordingInvoker, executor_on

ACCOUNT = "123456789012"
REGION = "us-east-1"
AWS_KINDS = ("lambda", "sqs", "sns", "eventbridge")
ACME_QUOTAS = {"active_tasks": 8, "schedules": 2, "schedule_rate_per_s": 0.05, "retry_attempts": 3}
BETA_QUOTAS = {"active_tasks": 10, "schedules": 5, "schedule_rate_per_s": 1, "retry_attempts": 10}
PRINCIPALS = {
    f"arn:aws:iam::{ACCOUNT}:role/AcmeScheduler": "acme",
    f"arn:aws:iam::{ACCOUNT}:role/BetaScheduler": "beta",
}

# What each secret holds: a value that shows up if it is ever sent, and the tenant it belongs to in its name.
SECRET_VALUES = {
    "PUNCTUAL_SECRET_TENANT_BETA__TOKEN": "beta-token-0b5e55ed",
    "PUNCTUAL_SECRET_TENANT_BETA__HOOK": "whsec_YmV0YS1zaWduaW5nLWtleS0wMTIzNDU2Nzg5YWJj",
    "PUNCTUAL_SECRET_TENANT_ACME__TOKEN": "acme-token-a11ce",
    "PUNCTUAL_SECRET_TENANT_ACME_X__TOKEN": "acme-x-token-5ca1ab1e",
    "PUNCTUAL_SECRET_OPS": "operator-token-0b5e55ed",
}
FILE_SECRETS = {
    "tenants/beta/token": "beta-file-0b5e55ed",
    "tenants/acme/token": "acme-file-a11ce",
    "token": "operator-file-0b5e55ed",
}
FILE_LINKS = {  # links acme put in its own folder, to beta's file and to beta's folder
    "tenants/acme/beta-token": "tenants/beta/token",
    "tenants/acme/beta": "tenants/beta",
}
STOLEN = ("0b5e55ed", "5ca1ab1e")  # what every secret acme must never obtain holds


def arns(owner: str) -> dict[str, str]:
    """The target ARN of each AWS kind that ``owner`` (a tenant, or ``ops`` for the operator) may call."""
    return {
        "lambda": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{owner}-fn",
        "sqs": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{owner}-orders",
        "sns": f"arn:aws:sns:{REGION}:{ACCOUNT}:{owner}-news",
        "eventbridge": f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/{owner}-bus",
    }


def aws_action(kind: str, arn: str, source: str | None = None) -> dict[str, Any]:
    """An action of an AWS ``kind`` at ``arn`` (EventBridge: with ``source``, by default the tenant's own)."""
    field = {"lambda": "function_arn", "sqs": "queue_arn", "sns": "topic_arn", "eventbridge": "event_bus_arn"}[kind]
    action: dict[str, Any] = {"kind": kind, field: arn}
    if kind == "eventbridge":
        action["source"] = source or "punctual.acme"
    return action


def tenant_map(acme_port: int, beta_port: int) -> dict[str, Any]:
    """The full tenant map: each tenant's receiver port, its ARNs and its quotas."""
    return {
        "principals": PRINCIPALS,
        "tenants": {
            "acme": {
                "targets": [f"127.0.0.1:{acme_port}"],
                "target_arns": sorted(arns("acme").values()),
                "quotas": ACME_QUOTAS,
            },
            "beta": {
                "targets": [f"127.0.0.1:{beta_port}"],
                "target_arns": sorted(arns("beta").values()),
                "quotas": BETA_QUOTAS,
            },
        },
        "quotas": {"active_tasks": 1000, "schedules": 10, "schedule_rate_per_s": 1, "retry_attempts": 5},
    }


def tenant_settings(base: Settings, acme_port: int, beta_port: int) -> Settings:
    """``base`` with the tenant map and the operator's own ARNs (the deployment-wide list, not the tenants')."""
    return Settings.model_validate(
        {
            **base.model_dump(),
            "tenant_map": json.dumps(tenant_map(acme_port, beta_port)),
            "allowed_target_arns": ",".join(sorted(arns("ops").values())),
        }
    )


# -- items as a direct-table role writes them ---------------------------------------------------------------------
def forge(
    client: Client, key: str, action: Mapping[str, Any], due_ms: int, now_ms: int, **attributes: dict[str, Any]
) -> dict[str, Any]:
    """A realistic task item under ``key``, as a direct-table role confined to ``acme/*`` may put it: built by the
    tenant-less client, moved under the key, its action written in as JSON (whatever any rule says of it), and
    ``attributes`` (raw attribute values) set over it; an attribute given as ``{}`` is removed."""
    name = key.rsplit("/", 1)[-1].replace("@", "-")
    task = client.build_task(from_ms(due_ms), {"kind": "log"}, {"forged": key}, task_id=name, now_ms=now_ms)
    item = client.to_item(task.model_copy(update={"task_id": key}), now_ms)
    item["action"] = {"S": canonical_json(dict(action))}
    for attribute, value in attributes.items():
        if value:
            item[attribute] = value
        else:
            item.pop(attribute, None)
    return item


def put(dynamodb: Any, settings: Settings, *items: dict[str, Any]) -> None:
    for item in items:
        dynamodb.put_item(TableName=settings.table_name, Item=item)


def snapshot(dynamodb: Any, settings: Settings, prefix: str) -> dict[str, dict[str, Any]]:
    """Every item whose key starts with ``prefix``, as DynamoDB holds it (a consistent scan)."""
    items: dict[str, dict[str, Any]] = {}
    for page in dynamodb.get_paginator("scan").paginate(TableName=settings.table_name, ConsistentRead=True):
        for item in page.get("Items", []):
            if item["task_id"]["S"].startswith(prefix):
                items[item["task_id"]["S"]] = item
    return items


# -- AWS, recorded ---------------------------------------------------------------------------------------------
class FakeAws:
    """Every AWS client a fire may use (lambda, sqs, sns, events, ssm, secretsmanager): each call is recorded as
    ``(service, operation, parameters)`` and answered as a success would be."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self._lock = threading.Lock()

    def client(self, service: str) -> Any:
        fake = self

        class _Service:
            def __getattr__(self, operation: str) -> Callable[..., dict[str, Any]]:
                def call(**parameters: Any) -> dict[str, Any]:
                    with fake._lock:
                        fake.calls.append((service, operation, parameters))
                    return _answer(service, operation, parameters)

                return call

        return _Service()

    def operations(self) -> list[tuple[str, str]]:
        with self._lock:
            return [(service, operation) for service, operation, _ in self.calls]


def _answer(service: str, operation: str, parameters: dict[str, Any]) -> dict[str, Any]:
    if (service, operation) == ("lambda", "invoke"):
        return {"StatusCode": 202}
    if (service, operation) == ("sqs", "get_queue_url"):
        return {"QueueUrl": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{parameters['QueueName']}"}
    if (service, operation) == ("events", "put_events"):
        return {"FailedEntryCount": 0, "Entries": [{"EventId": "e-1"}]}
    if (service, operation) == ("ssm", "get_parameter"):
        return {"Parameter": {"Value": f"ssm-{parameters['Name']}-0b5e55ed".replace("/", "_")}}
    if (service, operation) == ("secretsmanager", "get_secret_value"):
        return {"SecretString": json.dumps({"key": f"sm-{parameters['SecretId']}-0b5e55ed".replace("/", "_")})}
    return {"MessageId": "m-1"}


def action_env(settings: Settings, aws: FakeAws, secrets_dir: Path) -> ActionEnv:
    """What the executor fires with: the rules of ``settings`` (its tenant map), every secret of
    :data:`SECRET_VALUES` and :data:`FILE_SECRETS` (and the links of :data:`FILE_LINKS`), and ``aws`` for every
    AWS call."""
    for name, value in FILE_SECRETS.items():
        path = secrets_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value)
    for name, target in FILE_LINKS.items():
        if not (secrets_dir / name).is_symlink():
            (secrets_dir / name).symlink_to(secrets_dir / target)
    rules = TargetRules.from_settings(settings)
    resolver = SecretResolver(
        rules=rules.secrets,
        secrets_dir=secrets_dir,
        environ=dict(SECRET_VALUES),
        ssm_client=aws.client("ssm"),
        secretsmanager_client=aws.client("secretsmanager"),
    )
    return ActionEnv(
        rules=rules,
        secrets=resolver,
        clients={service: aws.client(service) for service in ("lambda", "sqs", "sns", "events")},
    )


# -- firing ----------------------------------------------------------------------------------------------------
def poll_and_fire(
    store: DynamoStores, settings: Settings, env: ActionEnv, rounds: int = 1, done: Callable[[], bool] | None = None
) -> tuple[list[PollReport], list[BatchReport]]:
    """Poll on the real clock and run every batch on one executor (``env``'s actions), ``rounds`` times or until
    ``done()``; the polls' and the batches' reports."""
    clock = SystemClock()
    executor = executor_on(store, settings, clock, actions=env)
    polls: list[PollReport] = []
    batches: list[BatchReport] = []
    try:
        for _ in range(rounds):
            invoker = RecordingInvoker()
            polls.append(poller_on(store, invoker, settings).poll(int(clock.wall_ms())))
            batches.extend(executor.run_batch(event) for event in invoker.events)
            if done is not None and done():
                break
    finally:
        executor.close()
    return polls, batches
