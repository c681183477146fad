"""Two tenants on one local stack (``punctual up --tenant beta``): the tenant ``local`` acts as a hostile one,
through the REST API and through items written straight to the table under its own keys (what the template's
direct-client role allows), against ``beta``. Every attempt is refused or never acted on; beta's schedule,
occurrences and listing are unchanged, and the attacker's receiver gets nothing.

Network: only loopback (DynamoDB Local, the API, two receivers); the NTP probe points at a closed loopback port.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.domain.keys import from_ms
from punctual.domain.model import TaskStatus
from punctual.errors import InvalidTaskError
from punctual.runtime.client import Client
from punctual.scheduling.api_client import ApiClient
from punctual.stores.dynamodb.codec import to_av
from punctual.targets import HttpAction, LogAction
from punctual_tools.local.stack import LocalStack, StackConfig
from punctual_tools.local.target import TargetServer
from support import now_ms, wait_until

BETA_TOKEN = "beta-token-value"  # beta's secret: a file of its own in the executors' secrets directory


@pytest.fixture
def receivers() -> Iterator[tuple[TargetServer, TargetServer]]:
    with TargetServer() as attacker, TargetServer() as victim:
        yield attacker, victim


@pytest.fixture
def stack(
    tmp_path: Path, fresh_table_name: str, receivers: tuple[TargetServer, TargetServer], monkeypatch: pytest.MonkeyPatch
) -> Iterator[LocalStack]:
    attacker, victim = receivers
    monkeypatch.setenv("PUNCTUAL_NTP_SERVER", "127.0.0.1:9")
    secrets_dir = tmp_path / "secrets"
    (secrets_dir / "tenants" / "beta").mkdir(parents=True)
    (secrets_dir / "tenants" / "beta" / "token").write_text(BETA_TOKEN)
    tenant_map = {
        "tenants": {
            "local": {"targets": [f"127.0.0.1:{attacker.port}"]},
            "beta": {"targets": [f"127.0.0.1:{victim.port}"]},
        }
    }
    config = StackConfig(
        home=tmp_path / "home",
        port=0,
        in_memory=True,
        poll_interval_s=2.0,
        prewarm=2,
        tenants=("beta",),
        api_port=0,
        settings_overrides={
            "table_name": fresh_table_name,
            "tenant_map": json.dumps(tenant_map),
            "default_misfire_grace_ms": 300_000,
            "secrets_dir": str(secrets_dir),
        },
    )
    with LocalStack(config) as running:
        yield running


def _api(stack: LocalStack, tenant: str) -> ApiClient:
    assert stack.api is not None
    return ApiClient(stack.api.url, token=stack.api_token_path(tenant).read_text().strip())


def _forge(dynamodb: Any, table: str, item: dict[str, Any], **attributes: Any) -> None:
    dynamodb.put_item(TableName=table, Item={**item, **to_av(attributes)})


@pytest.mark.timeout(180)
def test_a_hostile_tenant_can_neither_borrow_nor_forge_its_way_into_another(
    stack: LocalStack, receivers: tuple[TargetServer, TargetServer]
) -> None:
    attacker_receiver, victim_receiver = receivers
    settings = stack.settings
    assert settings is not None
    assert stack.ddb is not None
    table = Client(Settings.model_validate(settings.model_dump(include=set(Settings.model_fields))))
    dynamodb = table._store.table.client  # type: ignore[attr-defined]  # the stack's DynamoDB Local
    local, beta = _api(stack, "local"), _api(stack, "beta")
    soon = from_ms(now_ms() + 4_000)

    # Given beta's task carrying its own secret to its own receiver, and beta's schedule
    beta_hook = HttpAction(
        url=f"http://127.0.0.1:{victim_receiver.port}/b", secret_headers={"X-Token": "file:tenants/beta/token"}
    )
    beta.schedule(soon, beta_hook, {"n": 1}, task_id="b-1")
    beta.create_schedule("reports", "cron(0 9 * * ? *)", LogAction(message="report"))
    reports_before = beta.get_schedule("reports")

    # When local asks, through the API, for beta's secret, beta's receiver, or another loopback port
    refused = {
        "beta's secret": HttpAction(
            url=f"http://127.0.0.1:{attacker_receiver.port}/x", secret_headers={"X-Stolen": "file:tenants/beta/token"}
        ),
        "beta's secret by env": HttpAction(
            url=f"http://127.0.0.1:{attacker_receiver.port}/x",
            secret_headers={"X-Stolen": "env:PUNCTUAL_SECRET_TENANT_BETA__TOKEN"},
        ),
        "the deployment's secrets": HttpAction(
            url=f"http://127.0.0.1:{attacker_receiver.port}/x", signing_secret="env:PUNCTUAL_SECRET_BETA_WHSEC"
        ),
        "beta's receiver": HttpAction(url=f"http://127.0.0.1:{victim_receiver.port}/x"),
        "DynamoDB Local's port": HttpAction(url=f"http://127.0.0.1:{stack.ddb.port}/"),
    }
    for what, action in refused.items():
        with pytest.raises(InvalidTaskError):
            local.schedule(soon, action, task_id=f"try-{len(what)}")
        # Then each is refused, and nothing is stored
    assert local.list() == []

    # When local writes items under its own keys that name beta's secret, beta's schedule and beta as tenant
    template = table.build_task(soon, LogAction(message="x"), task_id="template")
    stolen = table.to_item(template)
    stolen_action = HttpAction(
        url=f"http://127.0.0.1:{attacker_receiver.port}/stolen", secret_headers={"X-Stolen": "file:tenants/beta/token"}
    )
    _forge(
        dynamodb,
        settings.table_name,
        stolen,
        task_id="local/steal",
        tenant="local",
        action=json.dumps(stolen_action.stored_fields()),
    )
    for i in range(30):
        _forge(dynamodb, settings.table_name, stolen, task_id=f"local/junk-{i:02d}", tenant="beta")
    definition = {
        "schedule_id": "beta/reports",
        "expression": "rate(1 second)",
        "timezone": "UTC",
        "action": {"kind": "http", "url": f"http://127.0.0.1:{attacker_receiver.port}/evil"},
        "payload": None,
        "cleanup": True,
    }
    _forge(
        dynamodb,
        settings.table_name,
        {},
        task_id="local/#schedule#evil",
        tenant="local",
        state="ACTIVE",
        version=99,
        definition=json.dumps(definition),
        created_ms=now_ms(),
        next_due_ms=now_ms(),
        cleanup=1,
        due_ms=now_ms(),
        due_bucket=stolen["due_bucket"]["S"],
    )

    # Then beta's task fires at beta's receiver, with beta's secret, once
    assert victim_receiver.wait_for_keys(["beta/b-1:0"], timeout=60), table.get("beta/b-1")
    # And the forged task is never sent anywhere: it fails at fire time, its secret refused
    assert wait_until(lambda: (table.get("local/steal") or template).status is TaskStatus.FAILED, timeout=60)
    assert "tenants/local/" in (table.get("local/steal").detail or "")  # type: ignore[union-attr]
    # And the forged schedule is never acted on: API calls on it touch nothing of beta's, the poller takes it out
    with pytest.raises(Exception):  # noqa: B017, PT011 - any refusal; what matters is below: nothing of beta's changed
        local.run_schedule_now("evil")
    with pytest.raises(Exception):  # noqa: B017, PT011 - any refusal, as above
        local.delete_schedule("evil")
    stack.poll_now()
    assert beta.get_schedule("reports") == reports_before
    assert [task.task_id for task in beta.list()] == ["b-1"]  # the 30 forged "beta" items are not beta's
    assert attacker_receiver.records() == []
    assert [r.task_id for r in victim_receiver.records()] == ["beta/b-1"]
    # And the forged schedule is out of the due index, with a detail saying why
    raw = dynamodb.get_item(
        TableName=settings.table_name, Key={"task_id": {"S": "local/#schedule#evil"}}, ConsistentRead=True
    )["Item"]
    assert "due_bucket" not in raw
    assert "detail" in raw
