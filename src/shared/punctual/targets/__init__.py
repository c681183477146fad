"""Targets: what a fire does and how it reaches its target. Each action kind is one module defining an
:class:`ActionKind` (model, runner, longest timeout, the clients it needs, its schedule-time check);
:mod:`.kinds` lists them all, in one place. Webhooks are signed (:mod:`.signing`) and secrets resolved by
reference (:mod:`.secrets`).
"""

from punctual.targets.aws import EventBridgeAction, LambdaAction, SnsAction, SqsAction
from punctual.targets.http import HttpAction
from punctual.targets.kinds import (
    ACTION_KINDS,
    action_kinds,
    check_action,
    kind_of,
    longest_action_timeout_ms,
    prepare_actions,
    run_action,
    start_action,
)
from punctual.targets.log import FireLog, LogAction
from punctual.targets.registry import ActionEnv, ActionKind, FireContext, FireLoop, TargetRules, Warmup

__all__ = [
    "ACTION_KINDS",
    "ActionEnv",
    "ActionKind",
    "EventBridgeAction",
    "FireContext",
    "FireLog",
    "FireLoop",
    "HttpAction",
    "LambdaAction",
    "LogAction",
    "SnsAction",
    "SqsAction",
    "TargetRules",
    "Warmup",
    "action_kinds",
    "check_action",
    "kind_of",
    "longest_action_timeout_ms",
    "prepare_actions",
    "run_action",
    "start_action",
]
