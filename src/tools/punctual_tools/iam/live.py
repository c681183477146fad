"""The live check: a local process refuses every AWS call its function's role would not allow in Lambda.

Opt-in (``PUNCTUAL_IAM_CHECK=1``, or a call of :func:`install_iam_check`). Once installed in a process, each call
of a watched boto3 client is judged before it is sent (:mod:`.recorder`): what the role of the function allows
goes through unchanged; anything else raises :class:`IamDeniedError`, a ``ClientError`` with AWS's code
``AccessDeniedException`` that names the function, its role, the call and the missing grant, and is logged at
ERROR, since a caller may swallow an AWS error as it would in Lambda.

Decisions come from the evaluator (:mod:`.simulate`) and are kept per process: the grants the role states on
concrete ARNs are decided in one batch when the check is installed, and every other kind of request the first time
it is made, so that no fire waits on node once the process is warm.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from punctual.config.settings import Settings
from punctual_tools.iam.calls import DEFAULT_ACCOUNT, AccessRequest, AwsCall, KeyNames, function_arn, queue_arn
from punctual_tools.iam.policies import RolePolicies, Stack, function_environment, role_policies
from punctual_tools.iam.recorder import ClientT, on_every_new_client, watch_client
from punctual_tools.iam.simulate import Judge, Verdict, judge_calls
from punctual_tools.template import load_template

log = logging.getLogger(__name__)

ENABLE_VARIABLE = "PUNCTUAL_IAM_CHECK"
TABLE = "TasksTable"


class IamDeniedError(ClientError):
    """A call the function's role does not allow: AWS's ``AccessDeniedException``, with what is missing."""

    def __init__(self, denied: list[Verdict]) -> None:
        self.denied = denied
        first = denied[0]
        message = (
            f"User: {first.role.principal} is not authorized to perform: {first.request.action} on resource: "
            f"{first.request.resource} (punctual IAM check: " + "; ".join(v.describe() for v in denied) + ")"
        )
        response: Any = {
            "Error": {"Code": "AccessDeniedException", "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }
        super().__init__(response, first.call.operation)


def check_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``PUNCTUAL_IAM_CHECK`` asks for the check (1, true, yes, on)."""
    value = (os.environ if environ is None else environ).get(ENABLE_VARIABLE, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def stack_of(settings: Settings, parameters: Mapping[str, str] | None = None) -> Stack:
    """The deployment the local runtime stands for: its table, executor function and queue, in the settings'
    region, the template's parameters as the settings give them (``ActionTargetArns``, ``PollGroups``,
    ``ShardCount``) unless ``parameters`` says otherwise."""
    names = {TABLE: settings.table_name, "ExecutorFunction": settings.executor_function.split(":function:")[-1]}
    attributes = {}
    if settings.dead_letter_queue_url and settings.dead_letter_queue_url.startswith(("http://", "https://")):
        attributes["TaskDeadLetterQueue.Arn"] = queue_arn(settings.dead_letter_queue_url, settings.region)
    given = {
        "ActionTargetArns": settings.allowed_target_arns,
        "PollGroups": str(settings.poll_groups),
        "ShardCount": str(settings.shard_count),
        **(parameters or {}),
    }
    return Stack(account=DEFAULT_ACCOUNT, region=settings.region, names=names, attributes=attributes, parameters=given)


def key_names(template: Mapping[str, Any], table_name: str) -> KeyNames:
    """The partition keys of the template's table (and its indexes) under the name ``table_name``."""
    return KeyNames.of_table(table_name, template["Resources"][TABLE]["Properties"])


class IamCheck:
    """Refuses the calls ``role``'s policies do not allow (see the module's docstring)."""

    def __init__(
        self,
        role: RolePolicies,
        keys: KeyNames,
        judge: Judge | None = None,
        environment: Mapping[str, str] | None = None,
        region: str = "us-east-1",
    ) -> None:
        self.role = role
        self.keys = keys
        self.judge = judge or Judge()
        self.environment = dict(environment or {})  # what the template gives the function (its settings)
        self.region = region
        self._logged: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._stop: Callable[[], None] | None = None

    @classmethod
    def for_function(
        cls,
        function: str,
        settings: Settings | None = None,
        *,
        template: Mapping[str, Any] | None = None,
        parameters: Mapping[str, str] | None = None,
    ) -> IamCheck:
        """The check of ``function`` (a logical id: ``PollerFunction``, ``ExecutorFunction``, ``FastPathFunction``,
        ``ApiFunction``) for the runtime of ``settings`` (default: from the environment), against ``template``
        (default: the checkout's template.yaml)."""
        settings = settings or Settings.from_env()
        template = template if template is not None else load_template()
        stack = stack_of(settings, parameters)
        return cls(
            role_policies(template, function, stack),
            key_names(template, settings.table_name),
            environment=function_environment(template, function, stack),
            region=settings.region,
        )

    def warm(self) -> IamCheck:
        """Decide now, in one batch, every grant the role states without a condition on a concrete ARN."""
        requests = [
            AccessRequest(action, resource)
            for s in self.role.statements
            if s["Effect"] == "Allow" and "Condition" not in s
            for action in _list(s["Action"])
            for resource in _list(s["Resource"])
            if "*" not in action and "*" not in resource and "?" not in resource
        ]
        self.judge.decide([(self.role, r) for r in requests])
        return self

    def authorize(self, call: AwsCall) -> None:
        """Raise :class:`IamDeniedError` unless the role allows every IAM request of ``call``."""
        call = replace(call, function=self.role.function)
        verdicts = judge_calls([call], {self.role.function: self.role}, self.judge, self.keys)
        self._refuse([v for v in verdicts if not v.decision.allowed])

    def authorize_request(self, request: AccessRequest, call: AwsCall | None = None) -> None:
        """The same for one IAM request made without boto3 (the local invoker stands for ``lambda:InvokeFunction``)."""
        call = call or AwsCall(request.action.split(":")[0], request.action.split(":")[1], {}, "", self.role.function)
        (decision,) = self.judge.decide([(self.role, request)])
        self._refuse([] if decision.allowed else [Verdict(call, request, self.role, decision)])

    def authorize_executor_invoke(self) -> None:
        """The invoke of the executor this function makes in AWS (``lambda:InvokeFunction`` on what the template
        gives it as ``PUNCTUAL_EXECUTOR_FUNCTION``: the executor's alias), for a runtime that invokes otherwise."""
        target = self.environment.get("PUNCTUAL_EXECUTOR_FUNCTION")
        if not target:
            raise ValueError(f"{self.role.function} invokes no executor (no PUNCTUAL_EXECUTOR_FUNCTION)")
        self.authorize_request(AccessRequest("lambda:InvokeFunction", function_arn(target, self.region)))

    def _refuse(self, denied: list[Verdict]) -> None:
        if not denied:
            return
        error = IamDeniedError(denied)
        with self._lock:
            new = [
                (v.request.action, v.request.resource)
                for v in denied
                if (v.request.action, v.request.resource) not in self._logged
            ]
            self._logged.update(new)
        if new:
            log.error("IAM check: %s", "; ".join(v.describe() for v in denied))
        raise error

    def watch(self, client: ClientT) -> ClientT:
        """Judge every call of ``client`` from now on; returns it."""
        return watch_client(client, self.authorize, self.role.function)

    def install(self) -> IamCheck:
        """Judge every call of every client this process makes from now on (clients made before are not watched:
        install before the handler module or the service is built)."""
        if self._stop is None:
            self._stop = on_every_new_client(self.watch)
        return self

    def uninstall(self) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None


def _list(node: Any) -> list[Any]:
    return node if isinstance(node, list) else [node]


_checks: dict[str, IamCheck] = {}
_checks_lock = threading.Lock()


def iam_check(function: str, settings: Settings | None = None) -> IamCheck:
    """This process's check of ``function`` (built and warmed once)."""
    with _checks_lock:
        if function not in _checks:
            _checks[function] = IamCheck.for_function(function, settings).warm()
        return _checks[function]


def install_iam_check(function: str, settings: Settings | None = None, *, force: bool = False) -> IamCheck | None:
    """Make every boto3 client this process builds from now on obey ``function``'s role, when
    ``PUNCTUAL_IAM_CHECK`` asks for it (or ``force``); the check, or None when it is off. For a process that runs
    one function (an executor worker, an API worker): call it before the handler module or the service is built."""
    if not (force or check_enabled()):
        return None
    return iam_check(function, settings).install()


def check_client(client: ClientT, function: str, settings: Settings | None = None, *, force: bool = False) -> ClientT:
    """Make ``client`` obey ``function``'s role, when ``PUNCTUAL_IAM_CHECK`` asks for it (or ``force``); returns
    ``client``. For a process that runs several functions (the stack's poller and fast path): the client of each."""
    if force or check_enabled():
        iam_check(function, settings).watch(client)
    return client
