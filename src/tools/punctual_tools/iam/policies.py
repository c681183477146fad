"""A function's role in template.yaml, as the identity policies IAM would hold once the stack is deployed.

:func:`role_policies` finds the role a function runs with (its ``Role: !GetAtt <Role>.Arn``), takes the role's
inline policies and every ``AWS::IAM::Policy`` attached to it, keeps what the template's conditions keep
(``Fn::If``, a resource's ``Condition``) under the given parameters, and resolves every intrinsic function
(``Ref``, ``Fn::GetAtt``, ``Fn::Sub``, ``Fn::Join``, ...) to concrete ARNs for a :class:`Stack`: the account,
region and physical names of one deployment (in tests, the fake account 123456789012 and the names the test's
resources carry). The ARNs are spelt as :mod:`.calls` spells those of a recorded call.

Works on the template as written and on the SAM-transformed one alike: every role is written in the template
(a function that names its ``Role`` gets no role or policy from SAM; tests/template checks that the transform
leaves the roles as written).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from punctual_tools.iam.calls import DEFAULT_ACCOUNT, function_arn, log_group_arn, table_arn
from punctual_tools.template.intrinsics import NO_VALUE, Resolver

_FUNCTION_TYPES = {"AWS::Lambda::Function", "AWS::Serverless::Function"}


@dataclass(frozen=True)
class Stack:
    """One deployment of the template, as far as IAM sees it.

    ``names`` gives a resource's physical name by logical id (a table's, a function's, a queue's name); a resource
    not named gets ``<stack_name>-<logical id>`` (or the name its properties give). ``attributes`` overrides a
    ``Fn::GetAtt`` by ``"<logical id>.<attribute>"`` (a queue whose ARN names another account, the table's real
    stream ARN: by default any stream of the table, ``.../table/<name>/stream/*``, since a table has one).
    ``parameters`` are the template's parameters (others at their defaults)."""

    account: str = DEFAULT_ACCOUNT
    region: str = "us-east-1"
    partition: str = "aws"
    stack_name: str = "punctual"
    names: Mapping[str, str] = field(default_factory=dict)
    attributes: Mapping[str, str] = field(default_factory=dict)
    parameters: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RolePolicies:
    """The identity policies of the role ``role`` (logical id) that ``function`` runs with, resolved."""

    function: str
    role: str
    principal: str  # the role session Lambda signs the function's calls with
    policies: tuple[dict[str, Any], ...]  # [{"name": ..., "policy": {"Version": ..., "Statement": [...]}}]

    @cached_property
    def fingerprint(self) -> str:
        """A digest of the policies (a cached decision is one of these exact policies)."""
        return hashlib.sha256(json.dumps(self.policies, sort_keys=True).encode()).hexdigest()[:16]

    @cached_property
    def condition_keys(self) -> frozenset[str]:
        """Every condition key a statement names: no other key can change a decision."""
        return frozenset(
            key for statement in self.statements for test in statement.get("Condition", {}).values() for key in test
        )

    @property
    def statements(self) -> list[dict[str, Any]]:
        return [s for p in self.policies for s in _as_list(p["policy"]["Statement"])]


def role_policies(template: Mapping[str, Any], function: str, stack: Stack | None = None) -> RolePolicies:
    """The resolved identity policies of the role ``function`` (a logical id) runs with."""
    stack = stack or Stack()
    resolver = StackResolver(template, stack)
    resources = template["Resources"]
    if resources.get(function, {}).get("Type") not in _FUNCTION_TYPES:
        raise KeyError(f"{function} is no function of the template")
    role_ref = resources[function]["Properties"].get("Role")
    if not (isinstance(role_ref, dict) and list(role_ref) == ["Fn::GetAtt"]):
        raise ValueError(f"{function} must run with a role the template writes (Role: !GetAtt <Role>.Arn)")
    getatt = role_ref["Fn::GetAtt"]
    role = getatt.split(".")[0] if isinstance(getatt, str) else getatt[0]
    return role_policies_of(template, role, stack, function=function, resolver=resolver)


def role_policies_of(
    template: Mapping[str, Any],
    role: str,
    stack: Stack | None = None,
    *,
    function: str = "",
    resolver: StackResolver | None = None,
) -> RolePolicies:
    """The resolved identity policies of the role ``role`` (a logical id), whoever assumes it."""
    stack = stack or Stack()
    resolver = resolver or StackResolver(template, stack)
    resources = template["Resources"]
    properties = resources[role]["Properties"]
    if properties.get("ManagedPolicyArns"):
        raise ValueError(f"{role} has managed policies, which cannot be read offline")
    policies = [resolver.resolve(p) for p in _as_list(properties.get("Policies", []))]
    for name, resource in resources.items():
        if resource["Type"] not in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            continue
        if "Condition" in resource and not resolver.condition(resource["Condition"]):
            continue
        if {"Ref": role} in _as_list(resource["Properties"].get("Roles", [])):
            policies.append(
                resolver.resolve(
                    {
                        "PolicyName": resource["Properties"].get("PolicyName", name),
                        "PolicyDocument": resource["Properties"]["PolicyDocument"],
                    }
                )
            )
    role_name = resolver.name_of(role)
    session = resolver.name_of(function) if function else "session"
    return RolePolicies(
        function=function,
        role=role,
        principal=f"arn:{stack.partition}:sts::{stack.account}:assumed-role/{role_name}/{session}",
        policies=tuple({"name": p["PolicyName"], "policy": p["PolicyDocument"]} for p in policies if p is not NO_VALUE),
    )


def function_roles(template: Mapping[str, Any]) -> dict[str, str]:
    """Each function's role, by logical id."""
    roles = {}
    for name, resource in template["Resources"].items():
        role = resource.get("Properties", {}).get("Role") if resource["Type"] in _FUNCTION_TYPES else None
        if isinstance(role, dict) and "Fn::GetAtt" in role:
            getatt = role["Fn::GetAtt"]
            roles[name] = getatt.split(".")[0] if isinstance(getatt, str) else getatt[0]
    return roles


def function_environment(template: Mapping[str, Any], function: str, stack: Stack | None = None) -> dict[str, str]:
    """The environment variables the template gives ``function`` in ``stack`` (the SAM template's Globals first,
    if it has them), resolved: what its handler reads its settings from."""
    resolver = StackResolver(template, stack or Stack())
    variables = dict(template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {}))
    variables.update(template["Resources"][function]["Properties"].get("Environment", {}).get("Variables", {}))
    return {name: str(value) for name, value in resolver.resolve(variables).items()}


def _as_list(node: Any) -> list[Any]:
    return node if isinstance(node, list) else [node]


class StackResolver(Resolver):
    """CloudFormation's intrinsic functions as a deployment of ``stack`` would evaluate them: the parameters'
    part is :class:`~punctual_tools.template.intrinsics.Resolver`'s; this names the resources, their ARNs and the
    pseudo parameters, and resolves everything (a function it does not know raises ``NotImplementedError``)."""

    partial = False

    def __init__(self, template: Mapping[str, Any], stack: Stack) -> None:
        super().__init__(template, stack.parameters)
        self.stack = stack

    # -- names ---------------------------------------------------------------------------------------------------
    def name_of(self, logical: str) -> str:
        if logical in self.stack.names:
            return self.stack.names[logical]
        props = self.resources.get(logical, {}).get("Properties", {})
        for key in ("TableName", "FunctionName", "QueueName", "TopicName", "RoleName", "LogGroupName", "Name"):
            if key in props:
                return str(self.resolve(props[key]))
        return f"{self.stack.stack_name}-{logical}"

    def _arn(self, service: str, rest: str, region: bool = True) -> str:
        where = f"{self.stack.region}:{self.stack.account}" if region else f":{self.stack.account}"
        return f"arn:{self.stack.partition}:{service}:{where}:{rest}"

    # -- what the deployment knows -------------------------------------------------------------------------------
    def pseudo_parameter(self, name: str) -> Any:
        pseudo = {
            "AWS::Region": self.stack.region,
            "AWS::AccountId": self.stack.account,
            "AWS::Partition": self.stack.partition,
            "AWS::StackName": self.stack.stack_name,
            "AWS::URLSuffix": "amazonaws.com",
        }
        return pseudo[name]

    def resource_ref(self, logical: str) -> Any:
        # SAM's AutoPublishAlias: !Ref <Function>.Alias and <Function>.Version
        if logical.endswith((".Alias", ".Version")) and logical.rpartition(".")[0] in self.resources:
            function, _, part = logical.rpartition(".")
            alias = self.resources[function]["Properties"]["AutoPublishAlias"] if part == "Alias" else "1"
            return f"{function_arn(self.name_of(function), self.stack.region, account=self.stack.account)}:{alias}"
        kind = self.resources[logical]["Type"]
        if kind == "AWS::SQS::Queue":
            return f"https://sqs.{self.stack.region}.amazonaws.com/{self.stack.account}/{self.name_of(logical)}"
        if kind == "AWS::SNS::Topic":
            return self._arn("sns", self.name_of(logical))
        if kind == "AWS::Lambda::Alias":
            props = self.resources[logical]["Properties"]
            return f"{self._function_arn(props['FunctionName'])}:{self.resolve(props['Name'])}"
        return self.name_of(logical)

    def _function_arn(self, node: Any) -> str:
        value = self.resolve(node)
        return function_arn(str(value), self.stack.region, account=self.stack.account)

    def attribute(self, logical: str, attribute: str) -> Any:  # noqa: PLR0911  one branch a resource type of the template
        key = f"{logical}.{attribute}"
        if key in self.stack.attributes:
            return self.stack.attributes[key]
        kind = self.resources[logical]["Type"]
        name = self.name_of(logical)
        if kind == "AWS::DynamoDB::Table":
            arn = table_arn(name, self.stack.region, self.stack.account)
            if attribute == "Arn":
                return arn
            if attribute == "StreamArn":
                return f"{arn}/stream/*"
        elif kind in _FUNCTION_TYPES and attribute == "Arn":
            return function_arn(name, self.stack.region, account=self.stack.account)
        elif kind == "AWS::SQS::Queue" and attribute in ("Arn", "QueueName"):
            return self._arn("sqs", name) if attribute == "Arn" else name
        elif kind == "AWS::Logs::LogGroup" and attribute == "Arn":
            return log_group_arn(name, self.stack.region, self.stack.account)
        elif kind == "AWS::IAM::Role" and attribute == "Arn":
            return self._arn("iam", f"role/{name}", region=False)
        elif kind == "AWS::SNS::Topic" and attribute == "TopicArn":
            return self._arn("sns", name)
        raise NotImplementedError(f"Fn::GetAtt {key} ({kind})")
