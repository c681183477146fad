"""CloudFormation's intrinsic functions, evaluated offline: one resolver for every reader of the template.

:class:`Resolver` evaluates what the template's parameters decide: ``Ref`` to a parameter (a
``CommaDelimitedList`` as its list of trimmed items), ``Fn::If`` on a condition, the conditions themselves
(``Fn::Equals``, ``Fn::Not``, ``Fn::And``, ``Fn::Or``, ``Condition``), ``Fn::FindInMap``, ``Fn::Join``,
``Fn::Select``, ``Fn::Split`` and ``AWS::NoValue`` (:data:`NO_VALUE`: a key or list item that resolves to it is
left out, as CloudFormation leaves the property unset). CloudFormation compares and looks up as strings:
``!Equals [!Ref PollGroups, 1]`` holds when the parameter is ``"1"``.

What only a deployment knows (a resource's name or ARN, a pseudo parameter such as ``AWS::Region``, so
``Fn::GetAtt`` and a ``Fn::Sub`` that names one) is left as written, and so is the function that holds it: the
table's ``CreateTable`` arguments and the tests' views of the template need only the parameters. A subclass that
knows a deployment names them (:class:`punctual_tools.iam.policies.StackResolver`, for the ARNs of a role's
policies) and resolves everything, or raises ``NotImplementedError`` for a function it does not know.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

NO_VALUE = None  # what AWS::NoValue resolves to: the property is not set
_SUB_VARIABLE = re.compile(r"\$\{([^}!]+)\}")


class UnresolvedError(NotImplementedError):
    """A node this resolver cannot evaluate: it needs a deployment, or names a function not known here."""


def _is_function(key: str) -> bool:
    return key in ("Ref", "Condition") or key.startswith("Fn::")


def _text(value: Any) -> str:
    """A value as CloudFormation compares it: a list as its comma-joined items, anything else as its text."""
    return ",".join(str(v) for v in value) if isinstance(value, list) else str(value)


class Resolver:
    """The intrinsic functions of ``template`` with ``parameters`` (by name; others at their defaults).

    :meth:`resolve` returns a node with every function it can evaluate evaluated; :meth:`condition` evaluates a
    named condition. Subclasses that know a deployment override :meth:`pseudo_parameter`, :meth:`resource_ref`
    and :meth:`attribute`, and set :attr:`partial` to False (everything resolved, or an error).
    """

    partial = True  # leave a node that cannot be evaluated as written (False: raise UnresolvedError)

    def __init__(self, template: Mapping[str, Any], parameters: Mapping[str, Any] | None = None) -> None:
        self.template = template
        self.parameters: Mapping[str, Any] = parameters or {}
        self.resources: Mapping[str, Any] = template.get("Resources") or {}
        self.definitions: Mapping[str, Any] = template.get("Parameters") or {}

    # -- what a deployment knows -----------------------------------------------------------------------------------
    def pseudo_parameter(self, name: str) -> Any:
        """``AWS::Region``, ``AWS::AccountId``, ... in the deployment."""
        raise UnresolvedError(f"Ref {name} (a deployment's)")

    def resource_ref(self, logical: str) -> Any:
        """What ``Ref`` gives for the resource ``logical`` in the deployment."""
        raise UnresolvedError(f"Ref {logical} (a deployment's)")

    def attribute(self, logical: str, attribute: str) -> Any:
        """``Fn::GetAtt`` of the resource ``logical`` in the deployment."""
        raise UnresolvedError(f"Fn::GetAtt {logical}.{attribute} (a deployment's)")

    # -- what the parameters decide --------------------------------------------------------------------------------
    def parameter(self, name: str) -> str | list[str]:
        """The parameter's value as text, or a ``CommaDelimitedList``'s trimmed items (``[""]`` when empty)."""
        definition = self.definitions[name]
        raw = str(self.parameters.get(name, definition.get("Default", "")))
        if definition.get("Type") == "CommaDelimitedList":
            return [part.strip() for part in raw.split(",")] if raw.strip() else [""]
        return raw

    def ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self.definitions:
            return self.parameter(name)
        if name.startswith("AWS::"):
            return self.pseudo_parameter(name)
        return self.resource_ref(name)

    def condition(self, name: str) -> bool:
        """The value of the template's condition ``name``."""
        return bool(self._value(self.template["Conditions"][name], partial=False))

    def resolve(self, node: Any) -> Any:
        """``node`` with its intrinsic functions evaluated (see the class and :attr:`partial`)."""
        return self._value(node, self.partial)

    def _value(self, node: Any, partial: bool) -> Any:
        if isinstance(node, dict):
            if len(node) == 1 and _is_function(next(iter(node))):
                ((fn, arg),) = node.items()
                try:
                    return self._function(fn, arg, partial)
                except UnresolvedError:
                    if partial:
                        return node
                    raise
            resolved = {key: self._value(value, partial) for key, value in node.items()}
            return {key: value for key, value in resolved.items() if value is not NO_VALUE}
        if isinstance(node, list):
            return [item for item in (self._value(i, partial) for i in node) if item is not NO_VALUE]
        return node

    def _function(self, fn: str, arg: Any, partial: bool) -> Any:  # noqa: C901, PLR0911, PLR0912  one branch an intrinsic
        def value(node: Any) -> Any:  # an argument: all of it, or the whole function stays as written
            return self._value(node, partial=False)

        if fn == "Ref":
            return self.ref(arg)
        if fn == "Fn::If":
            condition, when_true, when_false = arg
            return self._value(when_true if self.condition(condition) else when_false, partial)
        if fn == "Condition":
            return self.condition(arg)
        if fn == "Fn::Equals":
            return _text(value(arg[0])) == _text(value(arg[1]))
        if fn == "Fn::Not":
            return not value(arg[0])
        if fn == "Fn::And":
            return all(value(a) for a in arg)
        if fn == "Fn::Or":
            return any(value(a) for a in arg)
        if fn == "Fn::FindInMap":  # CloudFormation looks its keys up as strings: !Ref PollsPerMinute is "1"
            mapping, top, second = (_text(value(a)) for a in arg)
            return self.template["Mappings"][mapping][top][second]
        if fn == "Fn::Join":
            return str(arg[0]).join(str(v) for v in value(arg[1]))
        if fn == "Fn::Select":
            return value(arg[1])[int(value(arg[0]))]
        if fn == "Fn::Split":
            return str(value(arg[1])).split(arg[0])
        if fn == "Fn::GetAtt":
            logical, attribute = arg.split(".", 1) if isinstance(arg, str) else arg
            return self.attribute(logical, attribute)
        if fn == "Fn::Sub":
            return self._sub(arg)
        raise UnresolvedError(fn)

    def _sub(self, arg: Any) -> str:
        text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])

        def variable(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in variables:
                return str(self._value(variables[name], partial=False))
            if "." in name and not name.startswith("AWS::"):
                logical, _, attribute = name.partition(".")
                return str(self.attribute(logical, attribute))
            return str(self.ref(name))

        return _SUB_VARIABLE.sub(variable, str(text))


def evaluate_condition(template: Mapping[str, Any], name: str, parameters: Mapping[str, Any]) -> bool:
    """The template's condition ``name`` with ``parameters`` (others at their defaults)."""
    return Resolver(template, parameters).condition(name)


def resolve_value(template: Mapping[str, Any], node: Any, parameters: Mapping[str, Any]) -> Any:
    """A property's value as CloudFormation resolves it with ``parameters`` (others at their defaults): what the
    parameters decide evaluated, what a deployment names left as written (:class:`Resolver`); :data:`NO_VALUE` for
    a property set to ``AWS::NoValue``."""
    return Resolver(template, parameters).resolve(node)
