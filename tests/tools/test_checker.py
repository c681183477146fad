"""The checker: matching expected occurrences to observed fires, and what it counts as lost or extra.

Pure logic with explicit times; a Hypothesis property checks that the counts add up for random expected
sets and random fire orders with injected drops and duplicates.
"""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.domain.model import Task, TaskStatus
from punctual.targets import LogAction
from punctual_tools.checker import (
    Expected,
    Fire,
    check,
    expected_from_due,
    expected_from_tasks,
    fires_from_fire_log,
    fires_from_target,
)
from punctual_tools.local.target import TargetServer

relaxed = settings(deadline=None)
DUE = 1_900_000_000_000


def occ(name: str, due: int = DUE, outcome: str | None = None, grace: int | None = None) -> Expected:
    return Expected(name, 0, due, outcome, grace)


# -- matching ----------------------------------------------------------------------------------------------
def test_each_expected_occurrence_matches_its_earliest_fire() -> None:
    # Given two occurrences, each fired once, observed out of order
    expected = [occ("a"), occ("b", DUE + 100)]
    fires = [Fire("b:0", DUE + 103), Fire("a:0", DUE + 2)]

    # When checked
    verdict = check(expected, fires, epsilon_ms=50)

    # Then both match, nothing else is counted, and the drift is observed - due
    assert verdict.ok
    assert set(verdict.matched) == {"a:0", "b:0"}
    assert (verdict.lost, verdict.extra, verdict.late, verdict.early) == ((), (), (), ())
    assert (verdict.drift["count"], verdict.drift["max"], verdict.drift["p50"]) == (2, 3, 2)


def test_occurrences_are_keyed_by_task_and_occurrence() -> None:
    # Given occurrences 0 and 1 of one task, and a fire of occurrence 1 only
    verdict = check([Expected("t", 0, DUE), Expected("t", 1, DUE + 60_000)], [Fire("t:1", DUE + 60_001)])

    # Then occurrence 0 is lost, occurrence 1 matched
    assert verdict.lost == ("t:0",)
    assert verdict.matched == ("t:1",)


def test_duplicate_expected_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="t:0"):
        check([occ("t"), occ("t", DUE + 1)], [])


# -- duplicates and unknown keys -----------------------------------------------------------------------------
def test_a_second_fire_of_a_key_is_an_unexplained_extra() -> None:
    # Given one occurrence fired twice
    verdict = check([occ("a")], [Fire("a:0", DUE + 1), Fire("a:0", DUE + 5)])

    # Then the earliest fire matches and the other is an unexplained extra: the verdict fails
    assert verdict.matched == ("a:0",)
    assert verdict.extra == (Fire("a:0", DUE + 5),)
    assert verdict.unexplained == verdict.extra
    assert not verdict.ok
    assert verdict.problems() == ["1 unexplained extra fires"]
    assert verdict.drift["max"] == 1


def test_fires_of_unknown_keys_are_unexplained_extras() -> None:
    verdict = check([occ("a")], [Fire("a:0", DUE), Fire("zzz:0", DUE)])

    assert verdict.unknown == (Fire("zzz:0", DUE),)
    assert verdict.unexplained == (Fire("zzz:0", DUE),)
    assert not verdict.ok


def test_the_allowance_explains_one_extra_fire_per_key_and_no_more() -> None:
    # Given a key in the crash-window allowance fired twice, another fired three times, and an unknown key
    # that is in the allowance too
    fires = [
        Fire("a:0", DUE + 1),
        Fire("a:0", DUE + 9),
        Fire("b:0", DUE),
        Fire("b:0", DUE + 1),
        Fire("b:0", DUE + 2),
        Fire("x:0", DUE),
    ]

    # When checked with all three keys allowed one extra
    verdict = check([occ("a"), occ("b")], fires, allowance={"a:0", "b:0", "x:0"})

    # Then a's extra is explained; b's second is explained but its third is not; an unknown key never is
    assert len(verdict.extra) == 4
    assert verdict.explained == 2
    assert verdict.unexplained == (Fire("b:0", DUE + 2), Fire("x:0", DUE))
    assert not verdict.ok


def test_an_allowed_key_fired_once_is_fine() -> None:
    verdict = check([occ("a", outcome="MISSED")], [Fire("a:0", DUE)], allowance={"a:0"})

    # The crash window: it fired, then its executor was lost and the poller recorded it MISSED
    assert verdict.ok
    assert verdict.matched == ("a:0",)
    assert verdict.explicitly_missed == ()


# -- rejected attempts (retries) ----------------------------------------------------------------------------
def test_attempts_the_target_rejected_are_not_duplicates() -> None:
    # Given a task whose first two attempts the target answered 500, and whose third it accepted
    fires = [Fire("p:0", DUE + 1, accepted=False), Fire("p:0", DUE + 1_000, accepted=False), Fire("p:0", DUE + 3_000)]

    # When checked
    verdict = check([occ("p", outcome="SUCCEEDED")], fires, epsilon_ms=10_000)

    # Then it matched its accepted fire, with no extra, and the rejected attempts are reported
    assert verdict.ok
    assert verdict.extra == ()
    assert len(verdict.rejected) == 2
    assert verdict.drift["max"] == 3_000


def test_a_poison_task_only_ever_rejected_still_matched_and_not_lost() -> None:
    fires = [Fire("p:0", DUE + 1, accepted=False), Fire("p:0", DUE + 2, accepted=False)]

    verdict = check([occ("p", outcome="FAILED")], fires)

    assert verdict.ok
    assert verdict.matched == ("p:0",)
    assert verdict.failed == ()  # it fired (and failed at the target): not a "failed without a fire"


# -- lost against explicit outcomes --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("outcome", "bucket"),
    [
        ("MISSED", "explicitly_missed"),
        ("FAILED", "failed"),
        ("CANCELLED", "cancelled"),
        (None, "lost"),
        ("PENDING", "lost"),
        ("ARMED", "lost"),
        ("SUCCEEDED", "lost"),
    ],
)
def test_an_unfired_occurrence_is_lost_unless_the_table_says_why(outcome: str | None, bucket: str) -> None:
    verdict = check([occ("a", outcome=outcome)], [])

    assert getattr(verdict, bucket) == ("a:0",)
    assert verdict.ok is (bucket != "lost")


def test_a_cancelled_occurrence_that_fired_fails_the_verdict() -> None:
    verdict = check([occ("c", outcome="CANCELLED")], [Fire("c:0", DUE)])

    assert verdict.fired_cancelled == ("c:0",)
    assert not verdict.ok


# -- late, early, past grace ---------------------------------------------------------------------------------
def test_late_is_reported_at_the_edge_and_fails_only_when_asked() -> None:
    # Given fires exactly epsilon late, and one ms more
    expected = [occ("edge"), occ("late")]
    fires = [Fire("edge:0", DUE + 1_000), Fire("late:0", DUE + 1_001)]

    # Then only the second is late; the verdict holds unless lateness is a failure
    verdict = check(expected, fires, epsilon_ms=1_000)
    assert verdict.late == (("late:0", 1_001),)
    assert verdict.ok
    strict = check(expected, fires, epsilon_ms=1_000, late_is_failure=True)
    assert not strict.ok
    assert strict.problems() == ["1 late beyond ε"]


def test_a_fire_observed_before_due_beyond_epsilon_is_early() -> None:
    verdict = check([occ("a"), occ("b")], [Fire("a:0", DUE - 1_000), Fire("b:0", DUE - 1_001)], epsilon_ms=1_000)

    assert verdict.early == (("b:0", -1_001),)
    assert not verdict.ok


def test_a_fire_past_its_grace_fails_unless_its_policy_is_fire_late() -> None:
    # Given two occurrences with a 5 s grace that fired 7 s late, one of them allowed to fire late
    expected = [Expected("skip", 0, DUE, "SUCCEEDED", 5_000), Expected("late", 0, DUE, "SUCCEEDED", 5_000, True)]
    fires = [Fire("skip:0", DUE + 7_000), Fire("late:0", DUE + 7_000)]

    # Then both are late; only the one not allowed to fire late is past its grace
    verdict = check(expected, fires, epsilon_ms=1_000)
    assert {k for k, _ in verdict.late} == {"skip:0", "late:0"}
    assert verdict.past_grace == (("skip:0", 7_000),)
    assert not verdict.ok


# -- format --------------------------------------------------------------------------------------------------
def test_crash_windows_count_what_was_due_in_them_and_a_missed_occurrence_outside_fails() -> None:
    # Given two crash windows, [DUE, DUE+1000] and [DUE+5000, DUE+6000] (ends included), and occurrences due
    # inside and outside them: two MISSED inside, one fired inside, one MISSED outside
    expected = [
        occ("a", DUE, "MISSED"),
        occ("b", DUE + 1_000, "MISSED"),
        occ("c", DUE + 5_500, "SUCCEEDED"),
        occ("d", DUE + 3_000, "MISSED"),
        occ("e", DUE + 9_000, "SUCCEEDED"),
    ]
    fires = [Fire("c:0", DUE + 5_501), Fire("e:0", DUE + 9_001)]
    windows = [(DUE + 5_000, DUE + 6_000), (DUE, DUE + 1_000)]

    # When checked with the windows
    verdict = check(expected, fires, epsilon_ms=50, windows=windows)

    # Then the windows are counted, and the MISSED occurrence due between them fails the verdict
    assert verdict.windows == ((DUE, DUE + 1_000), (DUE + 5_000, DUE + 6_000))
    assert set(verdict.due_in_window) == {"a:0", "b:0", "c:0"}
    assert set(verdict.missed_in_window) == {"a:0", "b:0"}
    assert verdict.missed_outside_window == ("d:0",)
    assert not verdict.ok
    assert verdict.problems() == ["1 MISSED outside the crash windows"]
    text = verdict.format("crash")
    assert "due in the windows          3" in text
    assert "MISSED in the windows       2" in text
    assert "MISSED outside them         1   e.g. d:0" in text
    # ... and without windows the same MISSED occurrences are explicit outcomes, not failures
    plain = check(expected, fires, epsilon_ms=50)
    assert plain.ok
    assert plain.due_in_window == ()
    assert "crash windows" not in plain.format()


def test_format_prints_one_line_per_figure_with_examples_of_what_failed() -> None:
    verdict = check([occ(f"t{i}") for i in range(8)], [Fire("t0:0", DUE + 1)], epsilon_ms=1_000)

    text = verdict.format("scenario x")

    lines = text.splitlines()
    assert lines[0] == "scenario x: FAIL: 7 lost"
    assert any(line.split()[:2] == ["lost", "7"] and "(2 more)" in line for line in lines)
    assert any(line.strip().startswith("drift ms") and "p50 1.000" in line for line in lines)
    assert len(lines) == 15  # the verdict line and 14 figures


# -- adapters ------------------------------------------------------------------------------------------------
def test_adapters_read_the_fire_log_tasks_and_a_plan() -> None:
    entries = [{"event": "fired", "task_id": "a", "key": "a:0", "due_ms": DUE, "fired_ms": DUE + 0.5}]
    task = Task(
        task_id="a",
        due_at=datetime.fromtimestamp(DUE / 1000, UTC),
        action=LogAction(),
        misfire_grace_ms=5_000,
        status=TaskStatus.SUCCEEDED,
    )

    assert fires_from_fire_log(entries) == [Fire("a:0", DUE + 0.5)]
    assert expected_from_tasks([task]) == [Expected("a", 0, DUE, "SUCCEEDED", 5_000, False)]
    assert expected_from_due({"a": DUE, "b": DUE + 1}, {"a": TaskStatus.MISSED}) == [
        Expected("a", 0, DUE, "MISSED"),
        Expected("b", 0, DUE + 1, None),
    ]


def test_drift_of_a_retried_task_is_measured_from_its_first_due_instant() -> None:
    # Given a task whose retry moved due_at 4 s on, keeping the original in first_due_at
    first, moved = datetime.fromtimestamp(DUE / 1000, UTC), datetime.fromtimestamp((DUE + 4_000) / 1000, UTC)
    task = SimpleNamespace(
        task_id="r",
        occurrence=0,
        due_ms=DUE + 4_000,
        due_at=moved,
        first_due_at=first,
        status=TaskStatus.SUCCEEDED,
        misfire_grace_ms=60_000,
        misfire_policy="skip",
    )

    # Then it is expected at its first due instant
    (expected,) = expected_from_tasks([task])
    assert expected.due_ms == DUE
    assert check([expected], [Fire("r:0", DUE + 4_001)], epsilon_ms=1_000).late == (("r:0", 4_001),)


def test_the_loopback_target_records_posts_and_rejects_poison_keys(tmp_path: Path) -> None:
    # Given a target told to reject key p:0 always and key q:0 once
    with TargetServer(record_path=tmp_path / "seen.jsonl") as target:
        target.fail(["p:0"])
        target.fail(["q:0"], times=1)

        def post(key: str | None) -> int:
            headers = {"Content-Type": "application/json", "X-Punctual-Due-Ms": str(DUE)}
            if key:
                headers["Idempotency-Key"] = key
            request = urllib.request.Request(target.url, data=b'{"n": 1}', headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    result: int = response.status
                    return result
            except urllib.error.HTTPError as exc:
                return exc.code

        # When fires arrive
        statuses = [post(k) for k in ("a:0", "p:0", "p:0", "q:0", "q:0", None)]
        assert target.wait_for_keys(["a:0", "p:0", "q:0"], timeout=5)
        with urllib.request.urlopen(target.url.replace("/fire", "/records"), timeout=5) as response:
            served = json.loads(response.read())
        records = target.records()

    # Then it answered 500 to the poison key every time and to q:0 once, and recorded everything
    assert statuses == [200, 500, 500, 500, 200, 200]
    assert [(r.key, r.status, r.body, r.due_ms) for r in records][:2] == [
        ("a:0", 200, {"n": 1}, DUE),
        ("p:0", 500, {"n": 1}, DUE),
    ]
    assert len(served) == 6
    assert served[0]["key"] == "a:0"
    assert len((tmp_path / "seen.jsonl").read_text().splitlines()) == 6
    # ... and the checker sees the rejected attempts as such, the request without a key as unknown
    fires = fires_from_target(records)  # type: ignore[arg-type]  # the checker's protocol asks for writable fields
    verdict = check([occ("a"), occ("p", outcome="FAILED"), occ("q")], fires, epsilon_ms=float("inf"))
    assert (len(verdict.rejected), len(verdict.extra), len(verdict.unknown)) == (3, 1, 1)
    assert [f.key for f in verdict.unknown] == ["<none>"]


# -- property: the counts add up -----------------------------------------------------------------------------
@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Expected], list[Fire], set[str], dict[str, int]]:
    n = draw(st.integers(0, 30))
    outcomes = st.sampled_from([None, "SUCCEEDED", "MISSED", "FAILED", "CANCELLED", "PENDING"])
    expected = [
        Expected(f"t{i}", draw(st.integers(0, 2)), DUE + draw(st.integers(0, 10_000)), draw(outcomes)) for i in range(n)
    ]
    fires: list[Fire] = []
    copies: dict[str, int] = {}
    for e in expected:
        # drop (0 fires), once, or duplicated
        k = draw(st.sampled_from([0, 1, 1, 1, 2, 3]))
        copies[e.key] = k
        fires.extend(Fire(e.key, e.due_ms + draw(st.integers(-3_000, 3_000))) for _ in range(k))
    unknown = draw(st.integers(0, 3))
    fires.extend(Fire(f"stranger{i}:0", DUE) for i in range(unknown))
    fires = draw(st.permutations(fires))
    allowance = {e.key for e in expected if draw(st.booleans())}
    return expected, fires, allowance, copies


@relaxed
@given(scenarios())
def test_property_every_fire_and_every_occurrence_is_counted_exactly_once(
    scenario: tuple[list[Expected], list[Fire], set[str], dict[str, int]],
) -> None:
    expected, fires, allowance, copies = scenario

    verdict = check(expected, fires, epsilon_ms=1_000, allowance=allowance)

    # Every expected occurrence lands in exactly one bucket
    buckets = [verdict.matched, verdict.lost, verdict.explicitly_missed, verdict.failed, verdict.cancelled]
    assert sum(len(b) for b in buckets) == len(expected)
    assert len({k for b in buckets for k in b}) == len(expected)
    # Every observed fire is either the match of an occurrence or an extra
    assert len(verdict.matched) + len(verdict.extra) == len(fires) == verdict.fires
    # Matched are exactly the keys fired at least once; extras are the copies beyond the first plus strangers
    assert set(verdict.matched) == {k for k, c in copies.items() if c}
    assert len(verdict.extra) - len(verdict.unknown) == sum(max(c - 1, 0) for c in copies.values())
    # The allowance explains at most one extra per allowed key, never a stranger
    assert verdict.explained == sum(1 for k, c in copies.items() if c >= 2 and k in allowance)
    assert set(verdict.unknown) <= set(verdict.unexplained)
    # Early and late are disjoint subsets of the matched, and the drift counts every match
    assert not {k for k, _ in verdict.late} & {k for k, _ in verdict.early}
    assert {k for k, _ in (*verdict.late, *verdict.early)} <= set(verdict.matched)
    assert verdict.drift["count"] == len(verdict.matched)
    # Lost is exactly: no fire and no explicit outcome
    by_key = {e.key: e for e in expected}
    assert set(verdict.lost) == {
        k for k, c in copies.items() if not c and by_key[k].outcome not in ("MISSED", "FAILED", "CANCELLED")
    }
