"""How an executor cuts a batch into the parts it arms one after the other: the soonest due first, in parts
that double, and the rest at once when it is far enough ahead."""

from __future__ import annotations

from punctual.domain.model import ArmRequest
from punctual.executing.executor import ARM_AHEAD_MS, FIRST_ARM_PART, arm_parts


def _due(*offsets_ms: int) -> list[ArmRequest]:
    return [ArmRequest(task_id=f"t{i:03d}", due_ms=due, lease_until_ms=0) for i, due in enumerate(offsets_ms)]


def test_a_batch_due_soon_is_armed_soonest_first_in_parts_that_double() -> None:
    # Given 100 tasks due within the next second, handed over in reverse order
    batch = list(reversed(_due(*range(1_000, 1_100))))
    # When it is cut at now = 0
    parts = arm_parts(batch, now_ms=0)
    # Then the parts double from the first, hold every task once, and go in due order
    assert [len(p) for p in parts] == [FIRST_ARM_PART, 2 * FIRST_ARM_PART, 100 - 3 * FIRST_ARM_PART]
    flat = [r.due_ms for p in parts for r in p]
    assert flat == sorted(flat)
    assert len(flat) == 100


def test_what_is_due_beyond_the_arming_horizon_goes_in_one_last_part() -> None:
    # Given 20 tasks due now and 30 due just past the horizon
    soon, later = list(range(20)), [ARM_AHEAD_MS + 1 + i for i in range(30)]
    # When cut  Then the soon ones go in doubling parts up to the horizon, and the later ones all together
    assert [len(p) for p in arm_parts(_due(*soon, *later), now_ms=0)] == [FIRST_ARM_PART, 4, 30]
    # ... at the horizon exactly a task still counts as soon
    assert [len(p) for p in arm_parts(_due(*([ARM_AHEAD_MS] * 20)), now_ms=0)] == [FIRST_ARM_PART, 4]


def test_a_batch_with_a_long_lead_is_one_part() -> None:
    batch = _due(*(60_000 + i for i in range(250)))
    assert [len(p) for p in arm_parts(batch, now_ms=0)] == [250]
    assert arm_parts([], now_ms=0) == []
