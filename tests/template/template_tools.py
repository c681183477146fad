"""Offline tools for template.yaml: load it as SAM sees it, run the SAM transform locally (aws-sam-translator,
no AWS call), evaluate its conditions, and read IAM grants and ``Fn::Sub`` strings."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import intrinsics_multi_constructor

from punctual_tools.template import NO_VALUE, evaluate_condition, resolve_value

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
ARTIFACT_BUCKET = "local-artifacts"
_CODE_PROPERTY = {"AWS::Serverless::Function": "CodeUri", "AWS::Serverless::LayerVersion": "ContentUri"}

# AWS managed policies the translator may ask for (it would list them from IAM). The template needs none:
# every function has its own role, and a test fails if the transform attaches a managed policy anyway.
_MANAGED_POLICIES = {
    name: f"arn:aws:iam::aws:policy/{path}{name}"
    for path, name in [
        ("service-role/", "AWSLambdaBasicExecutionRole"),
        ("", "AWSXrayWriteOnlyAccess"),
        ("service-role/", "AWSLambdaDynamoDBExecutionRole"),
    ]
}


class _StubPolicyLoader:
    def load(self) -> dict[str, str]:
        return dict(_MANAGED_POLICIES)


class _SamLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML's loaders are untyped here
    """SafeLoader plus CloudFormation's short-form tags, in the form the SAM translator expects. (Its own
    ``yaml_parse`` registers the same constructor on ``yaml.SafeLoader`` itself, for every other user.)"""


def load_sam_template(path: Path = TEMPLATE) -> dict[str, Any]:
    _SamLoader.add_multi_constructor("!", intrinsics_multi_constructor)
    with open(path, encoding="utf-8") as handle:
        result: dict[str, Any] = yaml.load(handle, Loader=_SamLoader)  # noqa: S506 - a SafeLoader subclass
        return result


def package_locally(sam: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``sam`` with each local code path ``p`` replaced by ``s3://local-artifacts/p``, the form
    ``sam package`` leaves and the translator requires (the S3 key still names the local path)."""
    sam = copy.deepcopy(sam)
    entries = [(r.get("Type"), r.get("Properties", {})) for r in sam.get("Resources", {}).values()]
    entries.append(("AWS::Serverless::Function", sam.get("Globals", {}).get("Function", {})))
    for kind, props in entries:
        key = _CODE_PROPERTY.get(kind)
        value = props.get(key) if key else None
        if isinstance(value, str) and not value.startswith("s3://"):
            props[key] = f"s3://{ARTIFACT_BUCKET}/{value}"
    return sam


def transform_template(sam: dict[str, Any], parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    """The CloudFormation template the SAM transform makes of ``sam`` (which is not modified)."""

    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the translator wants a region (never calls AWS)
    result: dict[str, Any] = transform(package_locally(sam), dict(parameters or {}), _StubPolicyLoader())
    return result


# -- conditions: CloudFormation's resolution, shared with the local table's (create_table_kwargs) ----------------------
__all__ = ["NO_VALUE", "evaluate_condition", "resolve_value"]


# -- IAM ---------------------------------------------------------------------------------------------------
def resource_ref(node: Any) -> str:
    """A short, comparable spelling of a statement's Resource entry: ``Table.Arn`` for a GetAtt,
    ``Ref:X`` for a Ref, the template text for a Sub, the literal otherwise."""
    if isinstance(node, dict) and len(node) == 1:
        ((fn, arg),) = node.items()
        if fn == "Fn::GetAtt":
            return ".".join(arg) if isinstance(arg, list) else arg
        if fn == "Ref":
            return f"Ref:{arg}"
        if fn == "Fn::Sub":
            return arg if isinstance(arg, str) else arg[0]
    if isinstance(node, str):
        return node
    raise AssertionError(f"unexpected Resource entry {node!r}")


def branches(node: Any) -> Iterator[Any]:
    """``node`` itself, or both branches of an ``Fn::If`` (``AWS::NoValue`` dropped), recursively."""
    if isinstance(node, dict) and set(node) == {"Fn::If"}:
        for branch in node["Fn::If"][1:]:
            yield from branches(branch)
    elif node != {"Ref": "AWS::NoValue"}:
        yield node


def as_list(node: Any) -> list[Any]:
    return node if isinstance(node, list) else [node]


def role_statements(role: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every statement of the role's inline policies, under every condition."""
    statements: list[dict[str, Any]] = []
    for policy in as_list(role["Properties"].get("Policies", [])):
        for concrete in branches(policy):
            for statement in as_list(concrete["PolicyDocument"]["Statement"]):
                statements.extend(branches(statement))
    return statements


def grants(statements: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """``(action, resource)`` pairs the Allow statements grant."""
    pairs = set()
    for statement in statements:
        if statement["Effect"] != "Allow":
            continue
        for action in as_list(statement["Action"]):
            for resource in as_list(statement["Resource"]):
                pairs.add((action, resource_ref(resource)))
    return pairs


def string_like(pattern: str, value: str) -> bool:
    """IAM's ``StringLike``: case-sensitive, ``*`` any run of characters (empty, or holding ``/``), ``?`` one
    character; nothing else is special (``fnmatch`` would also read ``[...]`` as a set)."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL) is not None


def _condition_holds(
    condition: Mapping[str, Any], context: Mapping[str, list[str]], parameters: Mapping[str, str]
) -> bool:
    """Every operator of ``condition`` holds for ``context`` (multivalued keys; a key absent is an empty set).
    Knows ``ForAllValues:StringLike`` (true for an empty set) and ``ForAnyValue:StringLike`` (false for one)."""
    for operator, keys in condition.items():
        for key, patterns in keys.items():
            wanted = [
                substitute_parameters(sub_text(p), parameters) if isinstance(p, dict) else p for p in as_list(patterns)
            ]
            matches = [any(string_like(p, value) for p in wanted) for value in context.get(key, [])]
            if operator == "ForAllValues:StringLike":
                holds = all(matches)
            elif operator == "ForAnyValue:StringLike":
                holds = any(matches)
            else:
                raise NotImplementedError(operator)
            if not holds:
                return False
    return True


def decide(
    statements: list[dict[str, Any]],
    action: str,
    resource: str,
    context: Mapping[str, list[str]],
    parameters: Mapping[str, str] | None = None,
) -> str:
    """What IAM answers for ``action`` on ``resource`` (as :func:`resource_ref` spells it) under one identity's
    ``statements``: an explicit Deny wins, then an Allow, else the implicit deny. Actions and resources are
    compared exactly (the template writes no wildcard in either); conditions as :func:`_condition_holds`."""
    applicable = [
        s["Effect"]
        for s in statements
        if action in as_list(s["Action"])
        and resource in {resource_ref(r) for r in as_list(s["Resource"])}
        and _condition_holds(s.get("Condition", {}), context, parameters or {})
    ]
    if "Deny" in applicable:
        return "ExplicitlyDenied"
    return "Allowed" if "Allow" in applicable else "ImplicitlyDenied"


# -- Fn::Sub -----------------------------------------------------------------------------------------------
SUB_VARIABLE = re.compile(r"\$\{([^}!]+)\}")


def sub_text(node: Any) -> str:
    """The template string of an ``Fn::Sub`` (either form)."""
    arg = node["Fn::Sub"]
    return arg if isinstance(arg, str) else arg[0]


def substitute(text: str, placeholder: str = "0") -> str:
    """``text`` with every ``${...}`` replaced by ``placeholder`` (a bare number inside JSON is then 0)."""
    return SUB_VARIABLE.sub(placeholder, text)


def substitute_parameters(text: str, parameters: Mapping[str, str]) -> str:
    """``text`` with each ``${Name}`` replaced by ``parameters[Name]`` (a name not given is an error)."""
    return SUB_VARIABLE.sub(lambda m: parameters[m.group(1)], text)
