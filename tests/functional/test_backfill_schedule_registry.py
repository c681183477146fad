"""``punctual backfill-schedule-registry`` in-process on moto: schedules written before the schedule index's registry
(no ``schedule_id``), which the list of every schedule misses, are put in it, and a second run has nothing to do.
What the backfill writes, and its races, are checked on every DynamoDB kind in
``tests/contract/test_schedule_registry.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.domain.model import Unreadable
from punctual.runtime.client import Client
from punctual.stores.dynamodb.codec import schedule_key
from punctual.targets import LogAction
from punctual_tools.cli import main
from support import FakeClock


def test_the_cli_puts_the_older_schedules_in_the_registry_and_then_has_nothing_to_do(
    dynamodb: Any, settings: Settings, now_ms: int, local_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given two schedules written before the registry (one of them paused) and one written since
    client = Client(settings, dynamodb=dynamodb, clock=FakeClock(wall_ms=now_ms))
    for schedule_id in ("acme/daily", "hourly", "new"):
        client.create_schedule(schedule_id, "rate(1 hour)", LogAction(message="tick"))
    client.pause_schedule("hourly")
    for schedule_id in ("acme/daily", "hourly"):
        dynamodb.update_item(
            TableName=settings.table_name,
            Key={"task_id": {"S": schedule_key(schedule_id)}},
            UpdateExpression="REMOVE schedule_id",
        )
    assert [s.schedule_id for s in client.list_schedules()] == ["new"]
    # When a dry run goes first / Then it says what it would key, and keys nothing
    assert main(["--home", str(local_home), "backfill-schedule-registry", "--dry-run"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[-1].startswith("backfill-schedule-registry: ")
    assert ", 2 to key (dry run: none written), 0 skipped (keyed meanwhile), 0 error(s)" in out.out
    assert "item(s) scanned" in out.err  # the progress (every 5 s off a terminal)
    assert [s.schedule_id for s in client.list_schedules()] == ["new"]
    # When it runs for real / Then every schedule is listed, none unreadable
    assert main(["--home", str(local_home), "backfill-schedule-registry", "--segments", "3"]) == 0
    assert ", 2 keyed, 0 skipped (keyed meanwhile), 0 error(s)" in capsys.readouterr().out
    unreadable = Unreadable()
    assert [s.schedule_id for s in client.list_schedules(unreadable=unreadable)] == ["acme/daily", "hourly", "new"]
    assert unreadable.count == 0
    # And run again, it keys nothing
    assert main(["--home", str(local_home), "backfill-schedule-registry"]) == 0
    assert ", 0 keyed, " in capsys.readouterr().out
