"""Nothing that holds data goes with the stack by accident: what deleting or replacing each stateful resource does.

cfn-lint's list of stateful resource types (those whose deletion loses data) names which resources of the template
need a decision: the table and both queues are kept (``DeletionPolicy`` and ``UpdateReplacePolicy`` Retain), the
table is also protected from deletion, and the log groups, whose names are fixed and would stop a new stack of the
same name if kept, go with the stack after their retention.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cfnlint
from template_tools import ROOT

RETAINED = {"TasksTable", "TaskDeadLetterQueue", "ExecutorFailureQueue"}
DEPLOY_PAGE = ROOT / "docs" / "deploy.md"


def _stateful_types() -> set[str]:
    path = Path(cfnlint.__file__).parent / "data" / "AdditionalSpecs" / "StatefulResources.json"
    return set(json.loads(path.read_text(encoding="utf-8"))["ResourceTypes"])


def test_every_stateful_resource_is_retained_or_a_log_group(cfn_resources: dict[str, Any]) -> None:
    # Given every resource of a stateful type in the template CloudFormation gets
    stateful = {name: r for name, r in cfn_resources.items() if r["Type"] in _stateful_types()}
    assert set(stateful) >= RETAINED
    for name, resource in stateful.items():
        if name in RETAINED:
            # Then the table and the queues stay when the stack is deleted or they are replaced
            assert (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")) == ("Retain", "Retain"), name
        else:
            # ... and the rest are log groups, kept LogRetentionInDays, deleted with the stack
            assert resource["Type"] == "AWS::Logs::LogGroup", name
            assert resource["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionInDays"}, name
            assert resource.get("DeletionPolicy", "Delete") == "Delete", name


def test_the_kept_queues_keep_their_tls_only_policy(cfn_resources: dict[str, Any]) -> None:
    # Given the policies on the kept queues  Then they are kept too: deleting one would leave a kept queue open
    # to requests over plain HTTP
    policies = {
        name: resource
        for name, resource in cfn_resources.items()
        if resource["Type"] == "AWS::SQS::QueuePolicy"
        and {q["Ref"] for q in resource["Properties"]["Queues"]} & RETAINED
    }
    assert policies
    for name, resource in policies.items():
        assert (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")) == ("Retain", "Retain"), name


def test_the_table_is_protected_and_recoverable(cfn_resources: dict[str, Any]) -> None:
    # Given the table  Then DynamoDB refuses to delete it until its deletion protection is turned off, and it can be
    # restored to any second of the recovery period
    props = cfn_resources["TasksTable"]["Properties"]
    assert props["DeletionProtectionEnabled"] is True
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}


def test_every_function_logs_to_a_log_group_of_the_stack(cfn_resources: dict[str, Any]) -> None:
    # Given every function  Then it writes to a log group the template creates (so its retention applies), not to
    # one Lambda would create with no retention and leave behind
    functions = [r for r in cfn_resources.values() if r["Type"] == "AWS::Lambda::Function"]
    assert functions
    for function in functions:
        group = function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        assert cfn_resources[group]["Type"] == "AWS::Logs::LogGroup"


def test_the_tear_down_says_how_to_delete_what_is_kept() -> None:
    # Given docs/deploy.md's "Tear down"  Then it turns deletion protection off, and deletes the table and both queues
    section = DEPLOY_PAGE.read_text(encoding="utf-8").split("\n## Tear down\n", 1)[1].split("\n## ", 1)[0]
    for command in (
        "aws dynamodb update-table --table-name <TasksTableName> --no-deletion-protection-enabled",
        "aws dynamodb delete-table --table-name <TasksTableName>",
        "aws sqs delete-queue --queue-url <TaskDeadLetterQueueUrl>",
        "aws sqs delete-queue --queue-url <ExecutorFailureQueueUrl>",
    ):
        assert command in section, command
