"""The tenant_shard backfill on moto: tenant tasks written before the tenant_active_sharded index (no tenant_shard)
are keyed as a create keys them, so that the active count sees them; ended tasks, a task of no tenant and a
forged item are left as they are; a second run keys nothing; a race lost to an outcome is skipped, a failed request
an error. And ``punctual backfill-tenant-shards`` in-process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from punctual.config.settings import Settings
from punctual.domain.keys import from_ms
from punctual.runtime.client import Client
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.dynamodb.backfill import BackfillCounts, backfill_tenant_shards
from punctual.stores.dynamodb.table import Table
from punctual.targets import LogAction
from punctual_tools.cli import main
from support import FakeClock

OLD_ACTIVE = ("acme/old-0", "acme/old-1", "acme/old-2", "beta/old-0")


def _remove_tenant_shard(dynamodb: Any, table: str, task_id: str) -> None:
    dynamodb.update_item(TableName=table, Key={"task_id": {"S": task_id}}, UpdateExpression="REMOVE tenant_shard")


def _raw(dynamodb: Any, table: str, task_id: str) -> dict[str, Any]:
    item: dict[str, Any] = dynamodb.get_item(TableName=table, Key={"task_id": {"S": task_id}}, ConsistentRead=True)[
        "Item"
    ]
    return item


@pytest.fixture
def upgraded(dynamodb: Any, settings: Settings, now_ms: int) -> dict[str, dict[str, Any]]:
    """A table as an upgrade finds it: active tenant tasks written the old way (no tenant_shard), one written since,
    an old tenant task that ended, an operator's task, and an older item keyed under beta that forges tenant="acme".
    Returns each item as a create wrote it."""
    client = Client(settings, dynamodb=dynamodb, clock=FakeClock(wall_ms=now_ms))
    for task_id in (*OLD_ACTIVE, "acme/new", "acme/ended", "ops-1"):
        client.schedule(from_ms(now_ms + 600_000), LogAction(), task_id=task_id)
    client.cancel("acme/ended")
    forged = client.to_item(client.build_task(from_ms(now_ms + 600_000), LogAction(), task_id="beta/forged"))
    forged = {name: value for name, value in forged.items() if name != "tenant_shard"} | {"tenant": {"S": "acme"}}
    dynamodb.put_item(TableName=settings.table_name, Item=forged)
    created = {t: _raw(dynamodb, settings.table_name, t) for t in (*OLD_ACTIVE, "acme/new", "acme/ended")}
    for task_id in (*OLD_ACTIVE, "acme/ended"):
        _remove_tenant_shard(dynamodb, settings.table_name, task_id)
    return created


def test_the_backfill_keys_old_active_tenant_tasks_as_a_create_does_and_leaves_the_rest(
    dynamodb: Any, settings: Settings, upgraded: dict[str, dict[str, Any]]
) -> None:
    # Given the upgraded table, whose active count misses the tasks written the old way
    store = DynamoStores.from_settings(dynamodb, settings)
    assert (store.client.count_active("acme"), store.client.count_active("beta")) == (1, 0)
    untouched = {t: _raw(dynamodb, settings.table_name, t) for t in ("acme/ended", "ops-1", "beta/forged")}
    # When the backfill runs over 4 parallel segments
    counts = backfill_tenant_shards(store.table, segments=4)
    # Then the old active tasks are counted, each keyed exactly as a create keys it
    assert counts == BackfillCounts(scanned=8, found=5, updated=4, skipped=1, errors=0)
    assert (store.client.count_active("acme"), store.client.count_active("beta")) == (4, 1)
    for task_id in OLD_ACTIVE:
        assert _raw(dynamodb, settings.table_name, task_id) == upgraded[task_id]
    # And the ended task, the operator's and the forged item are as they were
    assert {t: _raw(dynamodb, settings.table_name, t) for t in untouched} == untouched
    # And a second run keys nothing
    again = backfill_tenant_shards(store.table, segments=4)
    assert again == BackfillCounts(scanned=8, found=1, updated=0, skipped=1, errors=0)
    assert (store.client.count_active("acme"), store.client.count_active("beta")) == (4, 1)


def test_a_dry_run_counts_what_it_would_key_and_writes_nothing(
    dynamodb: Any, settings: Settings, upgraded: dict[str, dict[str, Any]]
) -> None:
    # Given the upgraded table
    store = DynamoStores.from_settings(dynamodb, settings)
    before = dynamodb.scan(TableName=settings.table_name)["Items"]
    # When a dry run reads it
    counts = backfill_tenant_shards(store.table, segments=2, dry_run=True)
    # Then it finds the four, keys none, and the table is as it was
    assert counts == BackfillCounts(scanned=8, found=5, updated=0, skipped=1, errors=0)
    assert dynamodb.scan(TableName=settings.table_name)["Items"] == before


class EndsFirst:
    """A client as the stack races the backfill: just before each UpdateItem, the task's outcome is recorded
    (``due_bucket`` removed) or, for ``fails``, the request is throttled past botocore's retries."""

    def __init__(self, client: Any, ends: set[str], fails: set[str]) -> None:
        self._client, self.ends, self.fails = client, ends, fails

    def update_item(self, **request: Any) -> Any:
        task_id = request["Key"]["task_id"]["S"]
        if task_id in self.fails:
            error = {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}
            raise ClientError(error, "UpdateItem")  # type: ignore[arg-type]
        if task_id in self.ends:
            ended = {"TableName": request["TableName"], "Key": request["Key"], "UpdateExpression": "REMOVE due_bucket"}
            self._client.update_item(**ended)
        return self._client.update_item(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_a_task_that_ends_meanwhile_is_skipped_and_a_failed_request_is_an_error(
    dynamodb: Any, settings: Settings, upgraded: dict[str, dict[str, Any]]
) -> None:
    # Given the upgraded table, acme/old-0 ending just before its update and beta/old-0's update throttled
    store = DynamoStores.from_settings(dynamodb, settings)
    racing = Table(EndsFirst(dynamodb, ends={"acme/old-0"}, fails={"beta/old-0"}), store.config)  # type: ignore[arg-type]  # a stand-in that answers only the calls this test makes
    # When the backfill runs
    counts = backfill_tenant_shards(racing, segments=1)
    # Then the ended task is skipped (no key: it is in no index), the throttled one an error, the others keyed
    assert counts == BackfillCounts(scanned=8, found=5, updated=2, skipped=2, errors=1)
    assert "tenant_shard" not in _raw(dynamodb, settings.table_name, "acme/old-0")
    assert store.client.count_active("acme") == 3  # acme/old-1, acme/old-2, acme/new
    # And a second run keys what the error left
    assert backfill_tenant_shards(store.table).updated == 1
    assert store.client.count_active("beta") == 1


# -- punctual backfill-tenant-shards -------------------------------------------------------------------------
def test_the_cli_keys_the_old_tasks_reports_on_stderr_and_then_has_nothing_to_do(
    dynamodb: Any,
    settings: Settings,
    upgraded: dict[str, dict[str, Any]],
    local_home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = DynamoStores.from_settings(dynamodb, settings)
    # Given the upgraded table, When a dry run goes first
    assert main(["--home", str(local_home), "backfill-tenant-shards", "--dry-run"]) == 0
    # Then it says what it would key, and keys nothing
    out = capsys.readouterr()
    assert out.out.splitlines() == [
        "backfill-tenant-shards: 8 item(s) scanned, 5 to key (dry run: none written), "
        "1 skipped (ended or keyed meanwhile), 0 error(s)"
    ]
    assert "item(s) scanned" in out.err  # the progress (every 5 s off a terminal)
    assert store.client.count_active("acme") == 1
    # When it runs for real, Then it keys them, its progress on stderr and its summary on stdout
    assert main(["--home", str(local_home), "backfill-tenant-shards", "--segments", "3"]) == 0
    out = capsys.readouterr()
    summary = "8 item(s) scanned, 4 keyed, 1 skipped (ended or keyed meanwhile), 0 error(s)"
    assert out.out.splitlines() == [f"backfill-tenant-shards: {summary}"]
    assert "item(s) scanned" in out.err
    assert (store.client.count_active("acme"), store.client.count_active("beta")) == (4, 1)
    # And run again, it keys nothing
    assert main(["--home", str(local_home), "backfill-tenant-shards"]) == 0
    assert ", 0 keyed, " in capsys.readouterr().out


def test_the_cli_exits_1_when_a_request_failed(
    local_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a table the operator's credentials cannot read (none there)
    monkeypatch.setenv("PUNCTUAL_TABLE_NAME", "no-such-table")
    (local_home / "stack.json").write_text(json.dumps({"endpoint_url": None, "table_name": "no-such-table"}))
    # When the backfill runs, Then each segment's failed Scan is an error, and the exit says so
    assert main(["--home", str(local_home), "backfill-tenant-shards", "--segments", "2"]) == 1
    assert capsys.readouterr().out.rstrip().endswith("2 error(s)")


def test_the_cli_refuses_a_segment_count_out_of_range(local_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["--home", str(local_home), "backfill-tenant-shards", "--segments", "0"])
    assert refused.value.code == 2
    assert "out of range" in capsys.readouterr().err
