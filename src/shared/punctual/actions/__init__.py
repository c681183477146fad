"""Action kinds: what a fire does. Each kind is one module registering an :class:`ActionKind` (model, runner,
longest timeout, the clients it needs, its schedule-time check); importing this package registers them all.
"""

from .aws import EventBridgeAction, LambdaAction, SnsAction, SqsAction
from .http import HttpAction
from .log import FireLog, LogAction
from .registry import (
    ActionEnv,
    ActionKind,
    FireContext,
    FireLoop,
    TargetRules,
    Warmup,
    action_kinds,
    check_action,
    kind_of,
    longest_action_timeout_ms,
    prepare_actions,
    register,
    run_action,
    start_action,
)

__all__ = [
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
    "register",
    "run_action",
    "start_action",
]
