"""The operator's source on a running local stack, as ``punctual console`` finds it from the stack's home: the batches
its executors finished in the last hour's figures, the executors with their heartbeat items, the tasks still due in
the due index, and the tenants it serves. No timing is asserted: the test waits for the fires with a generous
deadline, then reads what the stack recorded."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from punctual.domain.model import TaskStatus
from punctual.runtime.client import Client
from punctual.stores.dynamodb import DynamoStores
from punctual.targets import LogAction
from punctual_tools.console.model import TaskFilter
from punctual_tools.console.source import local_source
from punctual_tools.local.stack import LocalStack, StackConfig
from support import now_ms, wait_until

pytestmark = pytest.mark.integration  # starts a local stack of its own (DynamoDB Local, pollers, executors)

FIRED = 5


@pytest.mark.timeout(300)
def test_the_console_reads_what_a_running_stack_did(
    tmp_path: Path, fresh_table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a local stack serving the tenant acme too, polling every 2 s
    monkeypatch.setenv("PUNCTUAL_NTP_SERVER", "127.0.0.1:9")  # the executors' probe stays on loopback
    config = StackConfig(
        home=tmp_path,
        port=0,
        poll_interval_s=2,
        prewarm=1,
        max_concurrency=2,
        tenants=("acme",),
        settings_overrides={"table_name": fresh_table_name, "ntp_server": None, "default_misfire_grace_ms": 300_000},
    )
    with LocalStack(config) as stack:
        assert stack.settings is not None
        client = Client(stack.settings)
        soon = datetime.fromtimestamp((now_ms() + 3_000) / 1000, UTC)
        later = datetime.fromtimestamp((now_ms() + 600_000) / 1000, UTC)
        fired = [client.schedule(due_at=soon, action=LogAction(message="now")).task_id for _ in range(FIRED)]
        waiting = client.schedule(due_at=later, action=LogAction(message="later")).task_id
        # When the first tasks have fired and their batches are in the stack's batch log
        assert wait_until(
            lambda: all((t := client.get(i)) is not None and t.status is TaskStatus.SUCCEEDED for i in fired),
            timeout=180,
            interval=0.5,
        )
        assert wait_until(lambda: sum(line.fired for line in stack.batch_log.read(0)) >= FIRED, timeout=60)
        source = local_source(tmp_path)
        try:
            lines = stack.batch_log.read(0)  # (a duplicate dispatch may still end a batch later: not in the view)
            now = now_ms()
            view = source.now(now)
            page = source.tasks(TaskFilter(), now)
            tenants = {usage.tenant for usage in source.tenants()}
        finally:
            assert isinstance(source.stores, DynamoStores)
            source.stores.table.close()
    # Then the last hour counts the fires, the executors that reported them show their heartbeats, the task still
    # waiting is listed, and the stack's tenants are known
    assert sum(m.fired for m in view.minutes) >= FIRED
    assert any(m.drift_max_ms is not None for m in view.minutes)
    assert view.executors
    shown = {e.executor_id: e for e in view.executors}
    assert {line.executor_id for line in lines} <= set(shown)
    firing = {line.executor_id for line in lines if line.fired}
    assert firing
    assert all(shown[e].beat_ms is not None and shown[e].batches >= 1 for e in firing)
    assert waiting in [t.task_id for t in page.tasks]
    assert tenants == {"local", "acme"}
