"""Load test: many users scheduling tasks through the client helper against a running local stack.

    .venv/bin/pip install -e '.[load]'
    .venv/bin/punctual up &                                   # or any stack: set PUNCTUAL_* for AWS
    .venv/bin/locust -f loadtest/locustfile.py --headless -u 20 -r 5 -t 60s

Each user schedules ``log`` tasks due 30-90 s ahead (the poller's lead window), with a small JSON payload,
and now and then reads one back, cancels one or reschedules one. Locust reports the client-side latency of
each call; the drift of the fires shows in ``punctual list`` and in ``.punctual/fires.jsonl``. Traffic goes only
to the stack's endpoint (loopback for the local stack). The run is bounded by ``-t``.
"""

from __future__ import annotations

import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from locust import User, between, events, task

from punctual import Client, LogAction, Settings
from punctual.local.stack import read_state


def _settings() -> Settings:
    state = read_state(Path(__file__).resolve().parents[1] / ".punctual")
    if state:
        return Settings.from_env(endpoint_url=state["endpoint_url"], table_name=state["table_name"],
                                 shard_count=state["shard_count"])
    return Settings.from_env()


class SchedulingUser(User):
    wait_time = between(0.05, 0.2)

    def on_start(self) -> None:
        self.client = Client(_settings())
        self.mine: list[str] = []

    def _call(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        exception = None
        result = None
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - reported to locust
            exception = exc
        events.request.fire(request_type="punctual", name=name, response_time=(time.perf_counter() - start) * 1000,
                            response_length=0, exception=exception, context={})
        return result

    @task(20)
    def schedule(self) -> None:
        task_id = f"load-{uuid.uuid4().hex[:12]}"
        due = datetime.now(UTC) + timedelta(seconds=random.uniform(30, 90))
        if self._call("schedule", self.client.schedule, due, LogAction(message="load"), {"n": random.random()},
                      task_id=task_id) is not None:
            self.mine.append(task_id)

    @task(3)
    def get(self) -> None:
        if self.mine:
            self._call("get", self.client.get, random.choice(self.mine))

    @task(1)
    def reschedule(self) -> None:
        if self.mine:
            due = datetime.now(UTC) + timedelta(seconds=random.uniform(30, 90))
            self._call("reschedule", self.client.reschedule, random.choice(self.mine), due)

    @task(1)
    def cancel(self) -> None:
        if self.mine:
            self._call("cancel", self.client.cancel, self.mine.pop(random.randrange(len(self.mine))))
