"""The IAM evaluator: @cloud-copilot/iam-simulate, a maintained simulator of AWS's policy evaluation logic (every
condition operator, explicit and implicit denies, action and resource validation against the Service
Authorization Reference), run offline by node on ``simulate.cjs`` beside this module.

:class:`Simulator` sends one batch of requests per node process (about a quarter of a second each);
:class:`Judge` keeps every decision, keyed by the role's policies, the action, the resource and the condition keys
those policies name (no other key can change it), so that a process asks node once per kind of call, not once per
call. :func:`judge_calls` is what the tests and the live check share: recorded calls in, one :class:`Verdict` per
IAM request out.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from punctual_tools.iam.calls import AccessRequest, AwsCall, KeyNames, requests_of
from punctual_tools.iam.policies import RolePolicies

SCRIPT = Path(__file__).with_name("simulate.cjs")
PACKAGE = Path("node_modules") / "@cloud-copilot" / "iam-simulate"
NODE_TIMEOUT_S = 120.0


class EvaluatorMissingError(RuntimeError):
    """node, or the evaluator's npm package, is not installed."""


@dataclass(frozen=True)
class Decision:
    """What IAM answers: ``Allowed``, ``ImplicitlyDenied`` (no statement allows it), ``ExplicitlyDenied`` (a Deny
    matched), or ``Error`` (the evaluator refused the request: an unknown action, a resource of the wrong type)."""

    result: str
    error: str | None = None

    @property
    def allowed(self) -> bool:
        return self.result == "Allowed"

    def __str__(self) -> str:
        return f"{self.result} ({self.error})" if self.error else self.result


@dataclass(frozen=True)
class Verdict:
    """One IAM request of one recorded call, judged against the role of the function that made it."""

    call: AwsCall
    request: AccessRequest
    role: RolePolicies
    decision: Decision

    def describe(self) -> str:
        """Which call of which function the role refuses, and the grant it would need."""
        context = "".join(f" with {k} = {list(v)}" for k, v in self.request.context)
        grant = f"Allow {self.request.action} on {self.request.resource}"
        return (
            f"{self.role.function} (role {self.role.role}): {self.request.why or self.call} needs "
            f"{self.request.action} on {self.request.resource}{context}: {self.decision}; missing grant: {grant}"
        )


def _node_modules() -> Path:
    """The project's node_modules holding the evaluator (``make setup`` installs it from package.json)."""
    for parent in [*Path(__file__).resolve().parents, *Path.cwd().resolve().parents, Path.cwd().resolve()]:
        if (parent / PACKAGE / "package.json").is_file():
            return parent / "node_modules"
    raise EvaluatorMissingError(
        "the IAM evaluator @cloud-copilot/iam-simulate is not installed: run `make setup` "
        "(npm install, from package.json)"
    )


class Simulator:
    """Decides batches of requests, one node process per batch."""

    def __init__(self, node: str | None = None) -> None:
        found = node or shutil.which("node")
        if found is None:
            raise EvaluatorMissingError("node is not on PATH: the IAM evaluator runs on it")
        self._node = found
        self._node_path = str(_node_modules())

    def decide(self, batch: Sequence[tuple[RolePolicies, AccessRequest]]) -> list[Decision]:
        if not batch:
            return []
        sets = {role.fingerprint: list(role.policies) for role, _ in batch}
        requests = [
            {
                "policySet": role.fingerprint,
                "principal": role.principal,
                "action": request.action,
                "resource": request.resource,
                "account": request.account,
                "context": request.context_dict(),
            }
            for role, request in batch
        ]
        done = subprocess.run(
            [self._node, str(SCRIPT)],
            input=json.dumps({"policySets": sets, "requests": requests}),
            capture_output=True,
            text=True,
            timeout=NODE_TIMEOUT_S,
            check=False,
            env={"NODE_PATH": self._node_path, "PATH": str(Path(self._node).parent)},
        )
        if done.returncode != 0:
            raise RuntimeError(f"the IAM evaluator failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
        answers = json.loads(done.stdout)["decisions"]
        return [Decision(a["decision"], a.get("error")) for a in answers]


class Judge:
    """Decisions, each asked of the evaluator once (thread-safe)."""

    def __init__(self, simulator: Simulator | None = None) -> None:
        self._simulator = simulator
        self._cache: dict[tuple[str, str, str, tuple[tuple[str, tuple[str, ...]], ...]], Decision] = {}
        self._lock = threading.Lock()
        self.asked = 0  # node runs so far

    @property
    def simulator(self) -> Simulator:
        if self._simulator is None:
            self._simulator = Simulator()
        return self._simulator

    def decide(self, items: Sequence[tuple[RolePolicies, AccessRequest]]) -> list[Decision]:
        """The decision on each ``(role, request)``; what is not known yet is asked in one batch."""
        keys = [(role.fingerprint, r.action, r.resource, r.only(role.condition_keys).context) for role, r in items]
        with self._lock:
            missing = {
                key: (role, request.only(role.condition_keys))
                for key, (role, request) in zip(keys, items, strict=True)
                if key not in self._cache
            }
        if missing:
            answers = self.simulator.decide(list(missing.values()))
            with self._lock:
                self._cache.update(zip(missing, answers, strict=True))
                self.asked += 1
        with self._lock:
            return [self._cache[key] for key in keys]


def judge_calls(
    calls: Iterable[AwsCall], roles: Mapping[str, RolePolicies], judge: Judge, keys: KeyNames | None = None
) -> list[Verdict]:
    """Each IAM request of each call, judged against the role of the function that made it (``roles`` by logical
    id of the function); a call of a function without a role in ``roles`` is an error."""
    pairs: list[tuple[AwsCall, AccessRequest, RolePolicies]] = []
    for call in calls:
        if call.function is None or call.function not in roles:
            raise KeyError(f"no role known for {call.function!r} (call {call})")
        role = roles[call.function]
        pairs.extend((call, request, role) for request in requests_of(call, keys))
    decisions = judge.decide([(role, request) for _, request, role in pairs])
    return [
        Verdict(call, request, role, decision) for (call, request, role), decision in zip(pairs, decisions, strict=True)
    ]
