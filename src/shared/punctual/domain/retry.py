"""Retries of a failed action: the per-task policy and the backoff (exponential, with full jitter).

``attempt`` counts the arms of an occurrence (every arm ADDs 1, so the first try runs as attempt 1). After
attempt *n* fails, the next try is due ``random(0, min(max_backoff_ms, backoff_ms * 2 ** (n - 1)))`` ms later,
unless *n* is already ``max_attempts`` or the occurrence is older than ``max_age_ms`` (now - first due).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

MAX_ATTEMPTS = 100


class RetryPolicy(BaseModel):
    """How a task's failed action is tried again.

    Parameters
    ----------
    max_attempts:
        Tries in all, the first included: 1 means no retry (the default).
    backoff_ms:
        Base of the exponential backoff: the cap of the first retry's delay.
    max_backoff_ms:
        Largest cap of a delay, however many attempts were made.
    max_age_ms:
        No retry once ``now - first due`` exceeds this (None: no age limit).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(1, ge=1, le=MAX_ATTEMPTS)
    backoff_ms: int = Field(1_000, ge=0, le=86_400_000)
    max_backoff_ms: int = Field(300_000, ge=0, le=86_400_000)
    max_age_ms: int | None = Field(None, ge=0, le=366 * 86_400_000)


def backoff_cap_ms(policy: RetryPolicy, attempt: int) -> int:
    """The largest delay after attempt number ``attempt`` (1-based) failed: ``min(max, base * 2**(n-1))``."""
    exponent = min(max(attempt - 1, 0), 62)  # the cap is reached long before; keeps the integer small
    return min(policy.max_backoff_ms, policy.backoff_ms * (1 << exponent))


def retry_delay_ms(
    policy: RetryPolicy | None, attempt: int, first_due_ms: int, now_ms: int, rand: Callable[[], float] = random.random
) -> int | None:
    """Delay before the next try of an occurrence whose attempt ``attempt`` just failed, or None: no retry.

    Parameters
    ----------
    policy:
        The task's retry policy (None: no retry).
    attempt:
        The attempt that failed (1 for the first try).
    first_due_ms:
        The occurrence's original due instant (before any retry moved it).
    now_ms:
        The instant of the failure.
    rand:
        A uniform draw in [0, 1) (injected by tests).

    Returns
    -------
    int or None
        Milliseconds in ``[0, backoff_cap_ms(policy, attempt)]`` (full jitter), or None when the attempts are
        spent (``attempt >= max_attempts``) or the occurrence is too old (``now - first due > max_age_ms``;
        at exactly ``max_age_ms`` it is still retried).

    Examples
    --------
    >>> p = RetryPolicy(max_attempts=3, backoff_ms=1_000)
    >>> retry_delay_ms(p, 1, 0, 0, rand=lambda: 0.5), retry_delay_ms(p, 2, 0, 0, rand=lambda: 0.5)
    (500, 1000)
    >>> retry_delay_ms(p, 3, 0, 0) is None
    True
    """
    if policy is None or attempt >= policy.max_attempts:
        return None
    if policy.max_age_ms is not None and now_ms - first_due_ms > policy.max_age_ms:
        return None
    cap = backoff_cap_ms(policy, attempt)
    return min(cap, int(rand() * (cap + 1)))
