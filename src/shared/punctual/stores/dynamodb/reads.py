"""Read responses parsed by ``json.loads`` instead of botocore's shape walk, which was most of a poll's CPU.

botocore parses every response by walking the operation's output model, one call per attribute value of
every item (what that cost, and how to measure it again: docs/decisions.md, "Reads parsed by json.loads"). For
the read operations below the wire format *is* the parsed form (an
item is a map of attribute values, ``{"S": ...}``, ``{"N": "..."}``, ``{"M": {...}}``, numbers stay strings),
with one exception: binary values (``B``, ``BS``) arrive base64-encoded and botocore decodes them to bytes.

So a ``before-parse`` handler (botocore's public hook for customising a response; it runs before the parser)
takes a successful response body whose bytes contain no binary key (no ``"B"`` or ``"BS"`` followed by a colon: in JSON
that can only be an object key, as inside a string the quotes would be escaped; an attribute *named* B also
matches, and merely takes botocore's path), decodes it with ``json.loads``
into the customised response, and hands the parser an empty body. botocore then builds ``ResponseMetadata``
as always and merges the two. Anything else (an error status, a body with binary values, a body that is not a
JSON object) is left to botocore untouched. ``tests/unit/test_reads.py`` checks the result equals botocore's
own parse for every kind of attribute value.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

FAST_OPERATIONS = ("Query", "BatchGetItem", "GetItem", "Scan")
_HANDLER_ID = "punctual-fast-reads"
FIRST_UNPARSED_STATUS = 300  # a redirect or an error: botocore parses it
_BINARY_KEY = re.compile(rb'"BS?"\s*:')  # a binary attribute value's key, whatever the whitespace


def parse_fast(response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any) -> None:
    """The ``before-parse`` handler: see the module docstring."""
    if response_dict.get("status_code", 500) >= FIRST_UNPARSED_STATUS:
        return
    body = response_dict.get("body")
    if not isinstance(body, bytes | bytearray) or not body or _BINARY_KEY.search(body):
        return
    try:
        parsed = json.loads(body)
    except ValueError:
        return
    if not isinstance(parsed, dict):
        return
    customized_response_dict.update(parsed)
    response_dict["body"] = b"{}"


def register_fast_reads(client: DynamoDBClient) -> None:
    """Parse ``client``'s read responses with :func:`parse_fast` (idempotent: registering twice is a no-op)."""
    for operation in FAST_OPERATIONS:
        client.meta.events.register(
            f"before-parse.dynamodb.{operation}", parse_fast, unique_id=f"{_HANDLER_ID}-{operation}"
        )
