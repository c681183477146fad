"""Unit-tier fixtures: an injected clock (never freezegun around code that sleeps)."""

from __future__ import annotations

import pytest


class FakeClock:
    """A clock that only moves when told to; ``sleep`` advances it instead of waiting."""

    def __init__(self, wall_ms: float = 1_700_000_000_000.0, monotonic: float = 1_000.0) -> None:
        self._wall_ms = wall_ms
        self._monotonic = monotonic

    def wall_ms(self) -> float:
        return self._wall_ms

    def monotonic(self) -> float:
        return self._monotonic

    def sleep(self, seconds: float) -> None:
        self.advance(max(seconds, 0.0))

    def advance(self, seconds: float) -> None:
        self._wall_ms += seconds * 1000.0
        self._monotonic += seconds


@pytest.fixture
def fake_clock() -> FakeClock:
    """A fake clock at 2023-11-14T22:13:20Z (wall 1,700,000,000,000 ms)."""
    return FakeClock()


@pytest.fixture
def make_clock() -> type[FakeClock]:
    """The FakeClock class, for tests that need one set elsewhere (test modules cannot import conftest)."""
    return FakeClock
