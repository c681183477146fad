"""How long to wait before trying a throttled or failed call again: exponential backoff with full jitter (each
wait drawn uniformly between 0 and ``min(cap, base * 2**attempt)``), so that many callers that failed together
do not try again together. One function, for the store's unprocessed keys, the recorder's writes and the API
client."""

from __future__ import annotations

import random
from collections.abc import Callable

BASE_S = 0.05
CAP_S = 2.0


def backoff_s(
    attempt: int, *, base_s: float = BASE_S, cap_s: float = CAP_S, draw: Callable[[], float] = random.random
) -> float:
    """Seconds to wait before try ``attempt + 1`` (``attempt`` counts from 0).

    Examples
    --------
    >>> backoff_s(0, draw=lambda: 1.0), backoff_s(3, draw=lambda: 1.0), backoff_s(10, draw=lambda: 1.0)
    (0.05, 0.4, 2.0)
    >>> backoff_s(3, draw=lambda: 0.5)
    0.2
    """
    return draw() * min(cap_s, base_s * 2.0 ** max(0, attempt))
