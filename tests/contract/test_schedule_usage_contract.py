"""The contract of a tenant's schedule usage (:mod:`punctual.domain.quota`), run on every implementation of the
schedule port: what a schedule holds of its tenant's ``schedules`` and ``schedule_rate_per_s`` is taken in the
schedule's own write, checked against the limits given, and given back by a delete, a pause, an end or a slower
rate; a tenant whose schedules were stored before any limit was given is counted from them, never from zero; and
parallel creates from stores of their own (as separate processes) never pass the limits."""

from __future__ import annotations

import functools

import pytest
from contract_tools import NOW, Backend
from test_schedule_store_contract import SECOND, every_10s, stored_schedule

from punctual.domain.quota import ScheduleLimits
from punctual.domain.schedules import Advance, ScheduleState
from punctual.errors import QuotaExceededError
from punctual.stores.ports import Stores
from support import run_threads

RACERS = 20
TIMEOUT_S = 120  # a hung racer fails the test instead of hanging it; no property depends on it


def test_a_schedule_past_the_tenants_schedules_is_refused_and_nothing_is_stored(store: Stores) -> None:
    # Given acme holding 2 schedules (one of them paused), its limit, and beta and the operator holding their own
    limits = ScheduleLimits(schedules=2, rate_per_s=10)
    store.schedules.create_schedule(every_10s("acme/a"), [], NOW, limits)
    paused = store.schedules.create_schedule(every_10s("acme/b"), [], NOW, limits)[0]
    store.schedules.change_schedule(paused, {"state": ScheduleState.PAUSED}, NOW, cleanup=False, limits=limits)
    store.schedules.create_schedule(every_10s("beta/a"), [], NOW, limits)
    store.schedules.create_schedule(every_10s("ops"), [], NOW)
    # When acme stores a third
    with pytest.raises(QuotaExceededError) as refused:
        store.schedules.create_schedule(
            every_10s("acme/c"), [every_10s("acme/c").occurrence(NOW + 10 * SECOND)], NOW, limits
        )
    # Then it is refused naming the quota, and neither it nor its occurrence is stored
    assert refused.value.quota == "schedules"
    assert store.schedules.get_schedule("acme/c") is None
    assert store.client.get("acme/c@20300601T120030.000Z") is None
    # And beta's room is its own
    store.schedules.create_schedule(every_10s("beta/b"), [], NOW, limits)
    # And a deleted schedule gives its place back
    store.schedules.change_schedule(
        stored_schedule(store, "acme/a"), {"state": ScheduleState.DELETED}, NOW, cleanup=False
    )
    store.schedules.create_schedule(every_10s("acme/c"), [], NOW, limits)


def test_the_rate_adds_up_and_a_pause_an_end_or_a_slower_rate_gives_it_back(store: Stores) -> None:
    # Given acme allowed 0.2 fires a second, holding two schedules every 10 s (0.1 each)
    limits = ScheduleLimits(schedules=10, rate_per_s=0.2)
    store.schedules.create_schedule(every_10s("acme/a"), [], NOW, limits)
    store.schedules.create_schedule(every_10s("acme/b", next_due_ms=NOW + 90 * SECOND), [], NOW, limits)
    # When a third asks for 0.1 more, or a change speeds one up
    with pytest.raises(QuotaExceededError) as too_fast:
        store.schedules.create_schedule(every_10s("acme/c"), [], NOW, limits)
    assert too_fast.value.quota == "schedule_rate_per_s"
    assert too_fast.value.field == "expression"
    with pytest.raises(QuotaExceededError):
        store.schedules.change_schedule(
            stored_schedule(store, "acme/a"), {"expression": "rate(5 seconds)"}, NOW, cleanup=False, limits=limits
        )
    # Then nothing changed; and a paused schedule's rate is free for another, until it resumes
    assert stored_schedule(store, "acme/a").expression == "rate(10 seconds)"
    store.schedules.change_schedule(
        stored_schedule(store, "acme/a"), {"state": ScheduleState.PAUSED}, NOW, cleanup=False
    )
    store.schedules.create_schedule(every_10s("acme/c"), [], NOW, limits)
    with pytest.raises(QuotaExceededError):
        store.schedules.change_schedule(
            stored_schedule(store, "acme/a"), {"state": ScheduleState.ACTIVE}, NOW, cleanup=False, limits=limits
        )
    # And a slower rate gives back the difference
    store.schedules.change_schedule(
        stored_schedule(store, "acme/c"), {"expression": "rate(20 seconds)"}, NOW, cleanup=False, limits=limits
    )
    store.schedules.create_schedule(every_10s("acme/d", expression="rate(20 seconds)"), [], NOW, limits)
    # And a schedule that ends (its last occurrence made) gives its rate back
    b = stored_schedule(store, "acme/b")
    assert store.schedules.advance_schedule(b, Advance(occurrences=[NOW + 90 * SECOND], next_due_ms=None), [], NOW).done
    store.schedules.create_schedule(every_10s("acme/e"), [], NOW, limits)


def test_a_tenants_schedules_stored_before_any_limit_count_from_the_first_limited_write(store: Stores) -> None:
    # Given acme's two schedules stored with no limit given (as they were before its usage was kept)
    store.schedules.create_schedule(every_10s("acme/a"), [], NOW)
    store.schedules.create_schedule(every_10s("acme/b"), [], NOW)
    # When the first write with a limit of 2 comes
    limits = ScheduleLimits(schedules=2, rate_per_s=10)
    with pytest.raises(QuotaExceededError) as refused:
        store.schedules.create_schedule(every_10s("acme/c"), [], NOW, limits)
    # Then the two already stored count (the usage did not start at zero), and nothing was stored
    assert refused.value.quota == "schedules"
    assert store.schedules.get_schedule("acme/c") is None
    # And once one is deleted there is room for exactly one
    store.schedules.change_schedule(
        stored_schedule(store, "acme/a"), {"state": ScheduleState.DELETED}, NOW, cleanup=False
    )
    store.schedules.create_schedule(every_10s("acme/c"), [], NOW, limits)
    with pytest.raises(QuotaExceededError):
        store.schedules.create_schedule(every_10s("acme/d"), [], NOW, limits)


@pytest.mark.parametrize(
    ("limits", "quota"),
    [
        (ScheduleLimits(schedules=5, rate_per_s=100), "schedules"),
        (ScheduleLimits(schedules=100, rate_per_s=0.5), "schedule_rate_per_s"),
    ],
    ids=["schedules", "rate"],
)
def test_parallel_creates_never_pass_a_quota_of_5(race_backend: Backend, limits: ScheduleLimits, quota: str) -> None:
    # Given a tenant allowed 5 schedules (or 0.5 fires a second: five schedules every 10 s), and 20 callers, each
    # with a store (and connection) of its own
    stores = [race_backend.new_store() for _ in range(RACERS)]

    def create(k: int) -> str:
        try:
            stores[k].schedules.create_schedule(every_10s(f"acme/s-{k:02d}"), [], NOW, limits)
        except QuotaExceededError as exc:
            return exc.quota
        return "created"

    # When all 20 create a schedule at once
    results = run_threads([functools.partial(create, k) for k in range(RACERS)], timeout=TIMEOUT_S)
    # Then exactly 5 were stored, and the 15 others refused naming the quota
    assert sorted(results) == ["created"] * 5 + [quota] * 15
    stored = [s for s in race_backend.store.schedules.list_schedules("acme/") if s.state is not ScheduleState.DELETED]
    assert len(stored) == 5
