"""The Tasks table as every part of the adapter reaches it (:class:`Table`): the boto3 client, the configuration,
a thread pool for many requests at once, reads by key, and one transaction of raw items."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from punctual.domain.backoff import backoff_s
from punctual.domain.keys import BUCKET_MS, bucket_start
from punctual.stores.dynamodb.config import StoreConfig
from punctual.stores.dynamodb.reads import register_fast_reads

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import KeysAndAttributesTypeDef, TransactWriteItemTypeDef

log = logging.getLogger(__name__)

# The table's indexes, as template.yaml names them (a test checks them against it: the runtime never reads the
# template, which would load PyYAML at every cold start)
DUE_INDEX = "due"
SCHEDULE_INDEX = "schedule"  # a recurring schedule's occurrences, by schedule id
TENANT_INDEX = "tenant"  # a tenant's items, by id (punctual.domain.tenancy)
# a tenant's active tasks, under TENANT_ACTIVE_SHARDS keys a tenant (what the active-task quota counts)
TENANT_ACTIVE_INDEX = "tenant_active_sharded"

BATCH_GET_LIMIT = 100  # keys in one BatchGetItem
BATCH_GET_ATTEMPTS = 8  # requests for one chunk's keys, the unprocessed ones again after a backoff (~5 s at most)


class Table:
    """The shared ground of the adapter's parts.

    Parameters
    ----------
    client:
        A boto3 DynamoDB *client* (low level), for AWS, DynamoDB Local or moto alike; its read responses are
        parsed by :func:`~punctual.stores.dynamodb.reads.register_fast_reads`.
    config:
        What the adapter is configured with.
    """

    def __init__(self, client: DynamoDBClient, config: StoreConfig) -> None:
        register_fast_reads(client)
        self.client = client
        self.config = config
        self.name = config.table_name
        self.sleep: Callable[[float], None] = time.sleep  # between tries of unprocessed keys
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def parallel(self, work: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        """``work`` over ``items`` on the table's thread pool (in order); inline for a single item.
        The pool's threads are started by the first caller and inherit its CPU priority."""
        if len(items) <= 1:
            return [work(item) for item in items]
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.config.db_threads, thread_name_prefix="ddb")
        return list(self._pool.map(work, items))

    def close(self) -> None:
        """Stop the thread pool's threads (a later :meth:`parallel` starts new ones)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)

    def get_item(self, key: str) -> dict[str, Any] | None:
        """The raw item keyed ``key`` (strongly consistent), or None."""
        response = self.client.get_item(TableName=self.name, Key={"task_id": {"S": key}}, ConsistentRead=True)
        item: dict[str, Any] | None = response.get("Item")
        return item

    def oldest_active_due(self, shards: range) -> int | None:
        """The bucket before the earliest due time in ``shards`` of the due index (a scan of the sparse, keys-only
        index: only where no watermark says it yet)."""
        wanted = {str(shard) for shard in shards}
        oldest: int | None = None
        for page in self.client.get_paginator("scan").paginate(
            TableName=self.name, IndexName=DUE_INDEX, ProjectionExpression="due_ms, due_bucket"
        ):
            for raw in page.get("Items", []):
                if raw["due_bucket"]["S"].rpartition("#")[2] not in wanted:
                    continue
                due = int(raw["due_ms"]["N"])
                oldest = due if oldest is None else min(oldest, due)
        return None if oldest is None else bucket_start(oldest) - BUCKET_MS

    def batch_get(
        self, keys: list[str], consistent: bool, projection: str | None = None, *, partial: bool = False
    ) -> list[dict[str, Any]]:
        """Raw items by key (:meth:`batch_get_read`); keys still unprocessed after every attempt: with
        ``partial``, left out (logged; a poll meets them again), else a RuntimeError."""
        items, unread = self.batch_get_read(keys, consistent, projection)
        if unread and not partial:
            raise RuntimeError(f"BatchGetItem left {len(unread)} keys unprocessed after {BATCH_GET_ATTEMPTS} attempts")
        return items

    def batch_get_read(
        self, keys: list[str], consistent: bool, projection: str | None = None
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """Raw items by key, and the keys left unread: BatchGetItem, 100 keys a request (in parallel), unprocessed
        keys (DynamoDB's answer to throttling) tried again after a jittered, growing wait
        (:func:`~punctual.domain.backoff.backoff_s`), up to :data:`BATCH_GET_ATTEMPTS` requests."""

        def fetch(ids: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
            request: KeysAndAttributesTypeDef = {
                "Keys": [{"task_id": {"S": t}} for t in ids],
                "ConsistentRead": consistent,
            }
            if projection:
                request["ProjectionExpression"] = projection
                if "#st" in projection:
                    request["ExpressionAttributeNames"] = {"#st": "status"}
            items: list[dict[str, Any]] = []
            unprocessed: list[dict[str, Any]] = []  # the keys still to read, as BatchGetItem answers them
            for attempt in range(BATCH_GET_ATTEMPTS):
                if attempt:
                    self.sleep(backoff_s(attempt - 1))
                response = self.client.batch_get_item(RequestItems={self.name: request})
                items.extend(response.get("Responses", {}).get(self.name, []))
                unread = response.get("UnprocessedKeys", {}).get(self.name)
                unprocessed = unread.get("Keys", []) if unread else []
                if not unprocessed:
                    return items, []
                request = {**request, "Keys": unprocessed}
            log.warning("BatchGetItem left %d keys unprocessed after %d attempts", len(unprocessed), BATCH_GET_ATTEMPTS)
            return items, [key["task_id"]["S"] for key in unprocessed]

        unique = list(dict.fromkeys(keys))
        chunks = [unique[i : i + BATCH_GET_LIMIT] for i in range(0, len(unique), BATCH_GET_LIMIT)]
        parts = self.parallel(fetch, chunks)
        return [item for items, _ in parts for item in items], [key for _, unread in parts for key in unread]

    def items_of(self, keys: list[str]) -> list[dict[str, Any]]:
        """Raw items of ``keys`` that exist, in the order of ``keys`` (strongly consistent)."""
        found = {item["task_id"]["S"]: item for item in self.batch_get(keys, consistent=True)}
        return [found[key] for key in keys if key in found]

    def transact(self, items: list[dict[str, Any]]) -> list[str] | None:
        """One TransactWriteItems of raw ``items``: None when it held, else each item's cancellation code. The
        idempotency token makes botocore's retry of a transaction whose response was lost a no-op success."""
        try:
            # the adapter builds its writes in DynamoDB's wire form (raw attribute values), not the stubs' TypedDicts
            transact_items = cast("list[TransactWriteItemTypeDef]", items)
            self.client.transact_write_items(TransactItems=transact_items, ClientRequestToken=uuid.uuid4().hex)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                raise
            reasons = exc.response.get("CancellationReasons") or []
            return [str(r.get("Code")) for r in reasons] + ["None"] * (len(items) - len(reasons))
        return None
