"""One resolver of CloudFormation's intrinsic functions for every reader of template.yaml: without a deployment it
evaluates what the parameters decide and leaves what a deployment names as written; with one (the IAM check's
``StackResolver``) it resolves everything."""

from __future__ import annotations

from typing import Any

import pytest

from punctual_tools.iam.policies import Stack, StackResolver
from punctual_tools.template import Resolver

TEMPLATE: dict[str, Any] = {
    "Parameters": {
        "Mode": {"Type": "String", "Default": "a"},
        "Arns": {"Type": "CommaDelimitedList", "Default": ""},
        "Groups": {"Type": "Number", "Default": 1},
    },
    "Mappings": {"Cycles": {"1": {"IntervalMs": 60000}}},
    "Conditions": {
        "IsB": {"Fn::Equals": [{"Ref": "Mode"}, "b"]},
        "HasArns": {"Fn::Not": [{"Fn::Equals": [{"Fn::Join": ["", {"Ref": "Arns"}]}, ""]}]},
        "OneGroup": {"Fn::Equals": [{"Ref": "Groups"}, 1]},
    },
    "Resources": {"Queue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "jobs"}}},
}
ARN = {"Fn::GetAtt": ["Queue", "Arn"]}
REGION_SUB = {"Fn::Sub": "arn:${AWS::Partition}:sqs:${AWS::Region}"}


def test_conditions_compare_as_cloudformation_does() -> None:
    # Given the defaults  Then a number parameter equals its literal, and an empty list joins to ""
    resolver = Resolver(TEMPLATE)
    assert resolver.condition("OneGroup")
    assert not resolver.condition("IsB")
    assert not resolver.condition("HasArns")
    # And a CommaDelimitedList's items are trimmed
    assert Resolver(TEMPLATE, {"Arns": "a, b"}).resolve({"Ref": "Arns"}) == ["a", "b"]
    assert Resolver(TEMPLATE, {"Arns": "x"}).condition("HasArns")


def test_without_a_deployment_what_it_names_is_left_as_written() -> None:
    # Given nodes that name a resource's attribute or a pseudo parameter, alone, in a function and under an If
    resolver = Resolver(TEMPLATE)
    joined = {"Fn::Join": [",", [ARN, "x"]]}
    node = {"Arn": ARN, "Sub": REGION_SUB, "Joined": joined, "Chosen": {"Fn::If": ["IsB", "b", ARN]}}
    # Then each is left as written (the If's chosen branch), and what the parameters decide is evaluated
    assert resolver.resolve(node) == {"Arn": ARN, "Sub": REGION_SUB, "Joined": joined, "Chosen": ARN}
    cycles = {"Fn::FindInMap": ["Cycles", {"Ref": "Groups"}, "IntervalMs"]}
    assert resolver.resolve(cycles) == 60000


def test_with_a_deployment_everything_is_resolved_or_refused() -> None:
    # Given the IAM check's resolver for a stack  Then the same nodes get the stack's names and ARNs
    resolver = StackResolver(TEMPLATE, Stack(account="123456789012", region="eu-west-1"))
    assert resolver.resolve(ARN) == "arn:aws:sqs:eu-west-1:123456789012:jobs"
    assert resolver.resolve(REGION_SUB) == "arn:aws:sqs:eu-west-1"
    # And a function it does not know is an error, not a node left as written
    with pytest.raises(NotImplementedError, match="Fn::Base64"):
        resolver.resolve({"Fn::Base64": "x"})
    assert Resolver(TEMPLATE).resolve({"Fn::Base64": "x"}) == {"Fn::Base64": "x"}
