"""The short-lead fast path on the local runtime: DynamoDB Local's table stream → dispatch → executor (arm).

A task scheduled 2 s before it is due cannot wait for the next poll (up to a minute away): the stream
delivers its write, the fast path dispatches it (writing nothing: the executor arms it from PENDING), and it
fires once. Drift figures for this path are the benchmark's (``make bench``); here it is asserted that the
fast path, not the poller, dispatched every task, and that each fired exactly once and SUCCEEDED.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from punctual.domain.keys import from_ms, next_tick
from punctual.domain.model import Task, TaskStatus
from punctual.runtime.client import Client
from punctual.targets import LogAction
from punctual_tools.checker import check, expected_from_tasks, fires_from_fire_log
from punctual_tools.demo import read_fires
from punctual_tools.local.stack import LocalStack, StackConfig
from support import now_ms, wait_until

# The longest interval the longest lead covers (lead >= interval + fast-path margin): the poller must not come
# while the test runs (see QUIET_S)
POLL_INTERVAL_S = 590
LEAD_MS = 600_000
QUIET_S = 60  # at least this long before the next poll, far more than scheduling and firing 30 tasks take


def _stored(client: Client, task_id: str) -> Task:
    task = client.get(task_id)
    assert task is not None, task_id
    return task


@pytest.mark.timeout(300)
def test_tasks_scheduled_2_s_ahead_are_dispatched_by_the_stream_and_fire_once(
    tmp_path: Path, fresh_table_name: str
) -> None:
    # Given the local stack polling about every 10 minutes, and at least a minute before its next poll
    config = StackConfig(
        home=tmp_path,
        port=0,
        poll_interval_s=POLL_INTERVAL_S,
        prewarm=2,
        settings_overrides={"table_name": fresh_table_name, "ntp_server": None, "lead_ms": LEAD_MS},
    )
    with LocalStack(config) as stack:
        assert stack.settings is not None
        assert stack.fast_poller is not None
        assert wait_until(lambda: len(stack.polls) >= 1, timeout=30)  # the start-up poll is over
        to_next_poll = next_tick(now_ms(), POLL_INTERVAL_S * 1000) - now_ms()
        if to_next_poll < QUIET_S * 1000:
            time.sleep(to_next_poll / 1000 + 1)
        polls_before = len(stack.polls)
        client = Client(stack.settings)
        prefix = f"fast-{uuid.uuid4().hex[:6]}-"

        # When 30 tasks are scheduled, each due 2 s after it is written, over about 3 s
        ids = []
        for i in range(30):
            task = client.schedule(
                from_ms(now_ms() + 2_000), LogAction(message="fast"), {"i": i}, task_id=f"{prefix}{i:02d}"
            )
            ids.append(task.task_id)
            time.sleep(0.1)

        # Then each fires exactly once (the fire log) and SUCCEEDED, armed once
        assert wait_until(lambda: len(read_fires(stack.fire_log, prefix)) >= 30, timeout=QUIET_S)
        assert wait_until(lambda: all(_stored(client, t).status is TaskStatus.SUCCEEDED for t in ids), timeout=QUIET_S)
        fires = Counter(f["task_id"] for f in read_fires(stack.fire_log, prefix))
        assert set(fires) == set(ids)
        assert set(fires.values()) == {1}
        assert {_stored(client, t).attempt for t in ids} == {1}
        # ... dispatched by the fast path, once each (its stream filter passes only PENDING images, so the
        # ARM and RECORD writes that follow dispatch nothing more); no poll dispatched any of them
        assert sum(r.dispatched for r in stack.fast_path_reports) == 30
        assert sum(r.dispatched for r in stack.polls[polls_before:]) == 0
        # ... and the checker agrees: 0 lost, 0 extra fires
        verdict = check(
            expected_from_tasks(client.get(t) for t in ids),
            fires_from_fire_log(read_fires(stack.fire_log, prefix)),
            epsilon_ms=1_500,
        )
        print(f"\n{verdict.format('fast path, tasks scheduled 2 s ahead')}")
        assert verdict.ok
        assert not verdict.lost
        assert not verdict.extra
