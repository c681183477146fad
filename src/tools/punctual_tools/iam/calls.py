"""What IAM is asked for when a botocore call is made: the action, the resource ARN and the condition keys.

One API call is not always one IAM request: ``TransactWriteItems`` is no IAM action at all (each item needs the
action of its kind on its own table: Put ``PutItem``, Update ``UpdateItem``, Delete ``DeleteItem``,
ConditionCheck ``ConditionCheckItem``), a ``BatchGetItem`` or ``BatchWriteItem`` asks once per table, and a
``PutEvents`` once per event bus. :func:`requests_of` turns one recorded :class:`AwsCall` into the
:class:`AccessRequest` list IAM evaluates, each with the ``dynamodb:LeadingKeys`` the request names (the partition
key values of its items) where DynamoDB sets that key.

ARNs are built from what the call names (a table name, a queue URL, a function name or ARN), in the client's
region and, where the call names no account, in ``account``: the same spelling :mod:`.policies` resolves the
template's ``!GetAtt`` and ``!Sub`` to, so that a recorded call and a grant compare as AWS would compare them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

DEFAULT_ACCOUNT = "123456789012"  # moto's account, and the account of every ARN a call does not spell out
LEADING_KEYS = "dynamodb:LeadingKeys"
ARN_ACCOUNT = 4  # arn:partition:service:region:account:...
UNQUALIFIED_FUNCTION_COLONS = 6  # arn:aws:lambda:region:account:function:name

# Calls that need no permission (STS answers every signed caller).
_NO_PERMISSION = {("sts", "GetCallerIdentity")}
# IAM's service prefix, where it is not botocore's service name.
_PREFIX = {"dynamodbstreams": "dynamodb"}
# Operations whose IAM action has another name.
_ACTION_NAME = {
    ("lambda", "Invoke"): "InvokeFunction",
    ("lambda", "InvokeWithResponseStream"): "InvokeFunction",
    ("sns", "PublishBatch"): "Publish",
    ("sqs", "SendMessageBatch"): "SendMessage",
    ("sqs", "DeleteMessageBatch"): "DeleteMessage",
    ("sqs", "ChangeMessageVisibilityBatch"): "ChangeMessageVisibility",
}
_TRANSACT_WRITE = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}
_BATCH_WRITE = {"PutRequest": "Item", "DeleteRequest": "Key"}
_EQUALS = re.compile(r"^\s*\(?\s*(#?[A-Za-z0-9_]+)\s*=\s*(:[A-Za-z0-9_]+)")


@dataclass(frozen=True)
class AwsCall:
    """One API call as botocore was asked to make it (the parameters before serialisation).

    ``service`` is botocore's service name (``dynamodb``, ``dynamodbstreams``, ``lambda``, ...), ``function`` the
    logical id of the template's function that made it (None: not attributed)."""

    service: str
    operation: str
    params: Mapping[str, Any]
    region: str
    function: str | None = None

    def __str__(self) -> str:
        return f"{self.service}.{self.operation}({_summary(self.params)})"


@dataclass(frozen=True)
class AccessRequest:
    """One request IAM evaluates: ``action`` on ``resource`` with the multivalued condition keys ``context``
    (sorted, hashable: the cache key of a decision). ``why`` says which part of the call needs it."""

    action: str
    resource: str
    context: tuple[tuple[str, tuple[str, ...]], ...] = ()
    why: str = ""

    @property
    def account(self) -> str:
        """The account that owns the resource (the ARN's fifth field; the default one for ``*``)."""
        parts = self.resource.split(":")
        return parts[ARN_ACCOUNT] if len(parts) > ARN_ACCOUNT + 1 and parts[ARN_ACCOUNT] else DEFAULT_ACCOUNT

    def context_dict(self) -> dict[str, list[str]]:
        return {key: list(values) for key, values in self.context}

    def only(self, keys: Iterable[str]) -> AccessRequest:
        """The same request with only the condition keys ``keys`` (those a policy names: no other can change
        the decision, and dropping them lets one decision serve every item of a table)."""
        wanted = set(keys)
        return AccessRequest(self.action, self.resource, tuple(kv for kv in self.context if kv[0] in wanted), self.why)


@dataclass(frozen=True)
class KeyNames:
    """The partition key attribute of each table and index (``dynamodb:LeadingKeys`` holds its values)."""

    tables: Mapping[str, str] = field(default_factory=dict)
    indexes: Mapping[tuple[str, str], str] = field(default_factory=dict)

    @classmethod
    def of_table(cls, table_name: str, properties: Mapping[str, Any]) -> KeyNames:
        """The key names of one ``AWS::DynamoDB::Table``'s properties, for the table named ``table_name``."""

        def hash_of(schema: Iterable[Mapping[str, str]]) -> str:
            return next(k["AttributeName"] for k in schema if k["KeyType"] == "HASH")

        indexes = {
            (table_name, index["IndexName"]): hash_of(index["KeySchema"])
            for index in properties.get("GlobalSecondaryIndexes", [])
        }
        return cls({table_name: hash_of(properties["KeySchema"])}, indexes)


# -- ARNs --------------------------------------------------------------------------------------------------------
def table_arn(name: str, region: str, account: str = DEFAULT_ACCOUNT) -> str:
    return name if name.startswith("arn:") else f"arn:aws:dynamodb:{region}:{account}:table/{name}"


def queue_arn(url: str, region: str) -> str:
    """The ARN of the queue at ``url`` (``https://sqs.<region>.amazonaws.com/<account>/<name>`` or a local
    endpoint's ``http://host:port/<account>/<name>``)."""
    split = urlsplit(url)
    account, _, name = split.path.strip("/").partition("/")
    match = re.match(r"sqs\.([a-z0-9-]+)\.amazonaws\.com", split.netloc)
    return f"arn:aws:sqs:{match.group(1) if match else region}:{account or DEFAULT_ACCOUNT}:{name}"


def function_arn(name: str, region: str, qualifier: str | None = None, account: str = DEFAULT_ACCOUNT) -> str:
    """The ARN Lambda authorizes an invoke of ``name`` on (a name, ``name:qualifier``, a partial or a full ARN).
    A qualified ARN is another resource than the function's own: a grant on one does not cover the other."""
    if name.startswith("arn:"):
        arn = name
    elif ":function:" in name:  # 123456789012:function:name[:qualifier]
        account, _, rest = name.partition(":function:")
        arn = f"arn:aws:lambda:{region}:{account}:function:{rest}"
    else:
        arn = f"arn:aws:lambda:{region}:{account}:function:{name}"
    return f"{arn}:{qualifier}" if qualifier and arn.count(":") == UNQUALIFIED_FUNCTION_COLONS else arn


def event_bus_arn(name: str | None, region: str, account: str = DEFAULT_ACCOUNT) -> str:
    name = name or "default"
    return name if name.startswith("arn:") else f"arn:aws:events:{region}:{account}:event-bus/{name}"


def parameter_arn(name: str, region: str, account: str = DEFAULT_ACCOUNT) -> str:
    return name if name.startswith("arn:") else f"arn:aws:ssm:{region}:{account}:parameter/{name.lstrip('/')}"


def secret_arn(secret_id: str, region: str, account: str = DEFAULT_ACCOUNT) -> str:
    """A secret's ARN; for a name, the ARN without the six random characters AWS appends (a grant ending in ``*``,
    as the template's do, covers both)."""
    return (
        secret_id if secret_id.startswith("arn:") else f"arn:aws:secretsmanager:{region}:{account}:secret:{secret_id}"
    )


def log_group_arn(name: str, region: str, account: str = DEFAULT_ACCOUNT) -> str:
    return f"arn:aws:logs:{region}:{account}:log-group:{name}:*"


# -- requests -----------------------------------------------------------------------------------------------------
def requests_of(call: AwsCall, keys: KeyNames | None = None, account: str = DEFAULT_ACCOUNT) -> list[AccessRequest]:
    """The IAM requests ``call`` makes (none for a call that needs no permission). An operation not mapped here
    asks for ``<prefix>:<Operation>`` on ``*``: a grant must name it before it passes."""
    if (call.service, call.operation) in _NO_PERMISSION:
        return []
    keys = keys or KeyNames()
    if call.service == "dynamodb":
        return list(_dynamodb(call, keys, account))
    prefix = _PREFIX.get(call.service, call.service)
    action = f"{prefix}:{_ACTION_NAME.get((call.service, call.operation), call.operation)}"
    return [AccessRequest(action, resource, why=str(call)) for resource in _resources(call, account)]


def _resources(call: AwsCall, account: str) -> list[str]:  # noqa: C901, PLR0911  one branch a service the runtime calls
    p, region = call.params, call.region
    if call.service == "dynamodbstreams":
        if "StreamArn" in p:
            return [_in_region(p["StreamArn"], region, account)]
        if "ShardIterator" in p:
            return [_in_region(stream_of_iterator(p["ShardIterator"]), region, account)]
        return ["*"]  # ListStreams: no resource-level permission
    if call.service == "lambda" and "FunctionName" in p:
        return [function_arn(p["FunctionName"], region, p.get("Qualifier"), account)]
    if call.service == "sqs":
        if "QueueUrl" in p:
            return [queue_arn(p["QueueUrl"], region)]
        if "QueueName" in p:
            return [f"arn:aws:sqs:{region}:{p.get('QueueOwnerAWSAccountId') or account}:{p['QueueName']}"]
    if call.service == "sns" and ("TopicArn" in p or "TargetArn" in p):
        return [p.get("TopicArn") or p["TargetArn"]]
    if call.service == "events" and call.operation == "PutEvents":
        return list(dict.fromkeys(event_bus_arn(e.get("EventBusName"), region, account) for e in p["Entries"]))
    if call.service == "ssm":
        names = [p["Name"]] if "Name" in p else list(p.get("Names", [])) or ([p["Path"]] if "Path" in p else [])
        return [parameter_arn(n, region, account) for n in names] or ["*"]
    if call.service == "secretsmanager" and "SecretId" in p:
        return [secret_arn(p["SecretId"], region, account)]
    if call.service == "logs" and "logGroupName" in p:
        return [log_group_arn(p["logGroupName"], region, account)]
    return ["*"]


def _in_region(arn: str, region: str, account: str) -> str:
    """DynamoDB Local spells its stream ARNs in a region and account of its own (``ddblocal``, 000000000000): the
    stream of the table the call's region and account hold, as a deployed table's would be."""
    return arn.replace(":ddblocal:000000000000:", f":{region}:{account}:", 1)


def stream_of_iterator(iterator: str) -> str:
    """The stream ARN a shard iterator belongs to: DynamoDB Streams' iterators start with it (``<arn>|...``)."""
    head = iterator.split("|", maxsplit=1)[0]
    return head if head.startswith("arn:") else "*"


def _dynamodb(call: AwsCall, keys: KeyNames, account: str) -> Iterator[AccessRequest]:
    p, region, op = call.params, call.region, call.operation
    if op in ("GetItem", "PutItem", "UpdateItem", "DeleteItem"):
        yield _item(f"dynamodb:{op}", p, keys, region, account=account, why=str(call))
    elif op in ("Query", "Scan"):
        table = table_arn(p["TableName"], region, account)
        index = p.get("IndexName")
        resource = f"{table}/index/{index}" if index else table
        leading = (
            _query_leading_key(
                p, keys.indexes.get((p["TableName"], index)) if index else keys.tables.get(p["TableName"])
            )
            if op == "Query"
            else None
        )
        yield AccessRequest(f"dynamodb:{op}", resource, _leading([leading] if leading else []), str(call))
    elif op in ("BatchGetItem", "BatchWriteItem"):
        for table, request in p["RequestItems"].items():
            items = (
                request["Keys"]
                if op == "BatchGetItem"
                else [entry[kind][part] for entry in request for kind, part in _BATCH_WRITE.items() if kind in entry]
            )
            values = [v for item in items if (v := _key_value(item, keys.tables.get(table))) is not None]
            yield AccessRequest(
                f"dynamodb:{op}", table_arn(table, region, account), _leading(values), f"{call} on {table}"
            )
    elif op in ("TransactWriteItems", "TransactGetItems"):
        for n, entry in enumerate(p["TransactItems"]):
            ((kind, item),) = entry.items()
            action = _TRANSACT_WRITE[kind] if op == "TransactWriteItems" else "GetItem"
            yield _item(f"dynamodb:{action}", item, keys, region, account=account, why=f"{call}: {kind} item {n}")
    elif "TableName" in p:  # DescribeTable, UpdateTable, ...: the table itself
        yield AccessRequest(f"dynamodb:{op}", table_arn(p["TableName"], region, account), why=str(call))
    else:
        yield AccessRequest(f"dynamodb:{op}", "*", why=str(call))


def _item(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
    action: str, request: Mapping[str, Any], keys: KeyNames, region: str, *, account: str, why: str
) -> AccessRequest:
    """The access one item's request (its ``TableName``, and its ``Key`` or whole ``Item``) asks for."""
    table = request["TableName"]
    value = _key_value(request.get("Key") or request.get("Item") or {}, keys.tables.get(table))
    return AccessRequest(action, table_arn(table, region, account), _leading([] if value is None else [value]), why)


def _key_value(item: Mapping[str, Any], name: str | None) -> str | None:
    """The partition key's value in ``item`` (a key or a whole item, in attribute-value form); a key of one
    attribute is the partition key whatever its name."""
    if name is None and len(item) == 1:
        name = next(iter(item))
    value = item.get(name) if name is not None else None
    if not isinstance(value, Mapping) or len(value) != 1:
        return None
    return str(next(iter(value.values())))


def _query_leading_key(params: Mapping[str, Any], name: str | None) -> str | None:
    """The partition key value a Query names (``<key> = :v`` in its key condition), if it can be read."""
    condition = params.get("KeyConditionExpression")
    if not isinstance(condition, str) or name is None:
        return None
    names = params.get("ExpressionAttributeNames") or {}
    for part in re.split(r"\s+AND\s+", condition, flags=re.IGNORECASE):
        match = _EQUALS.match(part)
        if match and names.get(match.group(1), match.group(1)) == name:
            value = (params.get("ExpressionAttributeValues") or {}).get(match.group(2))
            return _key_value({name: value}, name) if isinstance(value, Mapping) else None
    return None


def _leading(values: list[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return ((LEADING_KEYS, tuple(sorted(set(values)))),) if values else ()


def _summary(params: Mapping[str, Any]) -> str:
    """The parameters that say where a call goes (never an item's content)."""
    shown = {
        k: v
        for k, v in params.items()
        if k
        in (
            "TableName",
            "IndexName",
            "FunctionName",
            "InvocationType",
            "QueueUrl",
            "QueueName",
            "TopicArn",
            "TargetArn",
            "StreamArn",
            "Name",
            "SecretId",
            "logGroupName",
        )
    }
    if "TransactItems" in params:
        shown["TransactItems"] = [next(iter(i)) for i in params["TransactItems"]]
    if "RequestItems" in params:
        shown["RequestItems"] = list(params["RequestItems"])
    if "Entries" in params:
        shown["EventBusName"] = sorted({str(e.get("EventBusName", "default")) for e in params["Entries"]})
    return ", ".join(f"{k}={v}" for k, v in shown.items())
