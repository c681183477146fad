"""Unit-tier fixtures: an injected clock (never freezegun around code that sleeps)."""

from __future__ import annotations

import pytest

from support import FakeClock


@pytest.fixture
def fake_clock() -> FakeClock:
    """A fake clock at 2023-11-14T22:13:20Z (wall 1,700,000,000,000 ms)."""
    return FakeClock()
