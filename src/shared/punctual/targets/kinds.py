"""The action kinds there are, listed in one place (:data:`ACTION_KINDS`), and what the executor and the client do
with an action through its kind: check it, prepare its fires, start or run it.

A kind is defined in its own module (:mod:`.log`, :mod:`.http`, :mod:`.aws`) as an :class:`ActionKind` constant;
listing it here makes it known to executors (firing) and, through
:func:`~punctual.domain.model.register_action_model`, to the task model (validation). Nothing registers itself by
being imported.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

from punctual.domain.model import Action, register_action_model
from punctual.errors import ActionFailedError
from punctual.targets.aws import EVENTBRIDGE, LAMBDA, SNS, SQS
from punctual.targets.http import HTTP
from punctual.targets.log import LOG
from punctual.targets.registry import ActionEnv, ActionKind, FireContext, TargetRules, Warmup

log = logging.getLogger(__name__)

ACTION_KINDS: tuple[ActionKind[Any], ...] = (LOG, HTTP, LAMBDA, SQS, SNS, EVENTBRIDGE)


def _by_name(kinds: Iterable[ActionKind[Any]]) -> dict[str, ActionKind[Any]]:
    """``kinds`` by name, each model made known to the task model."""
    for kind in kinds:
        register_action_model(kind.model)
    return {kind.name: kind for kind in kinds}


_KINDS = _by_name(ACTION_KINDS)


def action_kinds() -> list[ActionKind[Any]]:
    return [_KINDS[name] for name in sorted(_KINDS)]


def kind_of(action: Action) -> ActionKind[Any]:
    kind = _KINDS.get(action.kind)
    if kind is None:
        raise ActionFailedError(f"no runner for action kind {action.kind!r}")
    return kind


def longest_action_timeout_ms() -> int:
    """The longest any kind may run, in ms (leases outlive it)."""
    return int(max((k.max_timeout_s for k in _KINDS.values()), default=0.0) * 1000)


def check_action(action: Action, rules: TargetRules) -> None:
    """Apply ``action``'s kind's target rules (when a task or a schedule is stored); raises InvalidRequestError
    naming the field."""
    kind = _KINDS.get(action.kind)
    if kind is not None and kind.check is not None:
        kind.check(action, rules)


def start_action(action: Action, context: FireContext, env: ActionEnv) -> Future[None] | None:
    """Start ``action``: a plain runner runs to its end here (returns None; raises on failure); a coroutine
    runner is handed to the event loop and its future returned (its exception is the failure)."""
    kind = kind_of(action)
    if kind.is_async:
        return env.fire_loop.submit(kind.run(action, context, env))  # type: ignore[arg-type]
    kind.run(action, context, env)
    return None


def prepare_actions(fires: Iterable[tuple[Action, float, str]], env: ActionEnv) -> int:
    """Schedule the warm-ups the kinds want for ``fires`` (``(action, seconds until due, task id)``, a batch just
    armed)
    on the event loop; returns how many. Best effort: a kind's error is logged, never raised, and a warm-up's
    failure only means its fires open their own connections."""
    by_kind: dict[str, list[tuple[Action, float, str]]] = {}
    for action, delay_s, task_id in fires:
        kind = _KINDS.get(action.kind)
        if kind is not None and kind.prepare is not None:
            by_kind.setdefault(kind.name, []).append((action, delay_s, task_id))
    warmups: list[Warmup] = []
    for name, items in by_kind.items():
        try:
            warmups += _KINDS[name].prepare(items, env)  # type: ignore[misc]
        except Exception:  # a warm-up is an optimisation; the fires do not depend on it
            log.exception("preparing %s fires failed", name)
    if warmups:
        try:
            env.fire_loop.schedule(warmups)
        except Exception:  # the loop is closing (the executor is ending): nothing to warm
            log.exception("scheduling warm-ups failed")
            return 0
    return len(warmups)


def run_action(action: Action, context: FireContext, env: ActionEnv) -> None:
    """Run ``action`` to its end in this thread (waiting for a coroutine runner); raises on failure."""
    future = start_action(action, context, env)
    if future is not None:
        future.result()
