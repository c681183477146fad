"""The local stand-in for the fast path's event source mapping: read DynamoDB Local's table stream.

In AWS, Lambda polls the table's stream, applies the filter of ``template.yaml`` and invokes the fast-path
function with batches of records. Locally, :class:`StreamReader` does the same in a background thread: it
follows every shard of the stream (new shards from their start, so that a shard roll-over loses nothing),
keeps the records that match the template's filter patterns and hands each non-empty batch to a callback
(the local stack's fast path: :func:`punctual.polling.fastpath.dispatch_stream_records`). It starts at the stream's
latest position: whatever was written before it started is the poller's, which finds every active task in
the due index anyway.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from punctual.config.clients import aws_client
from punctual.executing.priority import lower_current_thread
from punctual.polling.fastpath import matches

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient
    from mypy_boto3_dynamodbstreams.type_defs import ShardTypeDef

log = logging.getLogger(__name__)
BATCH_MOST_RECORDS = 1000  # the most records a GetRecords returns, and a batch the reader hands on


class StreamReader:
    """Follow the table's stream; call ``on_records(batch)`` with the records that match ``patterns``.

    Parameters
    ----------
    endpoint_url, region, table_name:
        Where the table is (DynamoDB Local serves the streams API on the same endpoint).
    on_records:
        Called in the reader's thread with each non-empty list of matching records (oldest first). An
        exception is logged and the batch is dropped: the poller still finds those tasks in the index.
    patterns:
        Event filter patterns (``punctual.schema.stream_filter_patterns()``); a record passes if it matches
        any. None passes everything.
    interval_s:
        Pause between two rounds over the shards. Every round costs DynamoDB Local and this process CPU
        (every write of the table is a stream record): a short pause makes late fires, a long one late
        dispatches (docs/decisions.md, "The local stream reader's pause").
    batch_window_s:
        How long to gather matching records after the first one before handing them over (Lambda's
        ``MaximumBatchingWindowInSeconds``): fewer, larger batches mean fewer executor invocations.
    """

    def __init__(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
        self,
        endpoint_url: str | None,
        region: str,
        table_name: str,
        on_records: Callable[[list[dict[str, Any]]], None],
        patterns: Sequence[Mapping[str, Any]] | None = None,
        *,
        interval_s: float = 0.25,
        batch_window_s: float = 0.25,
        refresh_s: float = 1.0,
    ) -> None:
        self._streams: DynamoDBStreamsClient = aws_client("dynamodbstreams", endpoint_url, region)
        self._dynamodb: DynamoDBClient = aws_client("dynamodb", endpoint_url, region)
        self._table = table_name
        self._on_records = on_records
        self._patterns = patterns
        self._interval_s = interval_s
        self._batch_window_s = batch_window_s
        self._refresh_s = refresh_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._iterators: dict[str, str] = {}
        self._known: set[str] = set()
        self._last_seq: dict[str, str] = {}
        self.stream_arn: str | None = None
        self.records_seen = 0
        self.records_passed = 0

    @property
    def streams_client(self) -> DynamoDBStreamsClient:
        """The ``dynamodbstreams`` client the reader follows the stream with (the calls Lambda's event source
        mapping makes under the fast-path function's role): a check watches it before :meth:`start`."""
        return self._streams

    def start(self) -> StreamReader:
        table = self._dynamodb.describe_table(TableName=self._table)["Table"]
        self.stream_arn = table.get("LatestStreamArn")
        if not self.stream_arn:
            raise RuntimeError(f"table {self._table} has no stream: the fast path needs one (see template.yaml)")
        for shard in self._shards():
            self._known.add(shard["ShardId"])
            if "EndingSequenceNumber" not in shard.get("SequenceNumberRange", {}):  # open: follow from now
                self._iterators[shard["ShardId"]] = self._iterator(shard["ShardId"], "LATEST")
        self._thread = threading.Thread(target=self._run, name="stream", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _shards(self) -> list[ShardTypeDef]:
        shards: list[ShardTypeDef] = []
        start: str | None = None
        while True:
            kwargs: dict[str, Any] = {"StreamArn": self.stream_arn}
            if start:
                kwargs["ExclusiveStartShardId"] = start
            description = self._streams.describe_stream(**kwargs)["StreamDescription"]
            shards.extend(description.get("Shards", []))
            start = description.get("LastEvaluatedShardId")
            if not start:
                return shards

    def _iterator(self, shard_id: str, kind: str, sequence: str | None = None) -> str:
        kwargs: dict[str, Any] = {"StreamArn": self.stream_arn, "ShardId": shard_id, "ShardIteratorType": kind}
        if sequence is not None:
            kwargs["SequenceNumber"] = sequence
        return self._streams.get_shard_iterator(**kwargs)["ShardIterator"]

    def _discover(self) -> None:
        """Shards that appeared since the last look (a roll-over): read them from their start."""
        for shard in self._shards():
            shard_id = shard["ShardId"]
            if shard_id not in self._known:
                self._known.add(shard_id)
                self._iterators[shard_id] = self._iterator(shard_id, "TRIM_HORIZON")

    def _read(self, shard_id: str, iterator: str) -> list[dict[str, Any]]:
        try:
            response = self._streams.get_records(ShardIterator=iterator, Limit=BATCH_MOST_RECORDS)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ExpiredIteratorException":
                raise
            last = self._last_seq.get(shard_id)
            self._iterators[shard_id] = (
                self._iterator(shard_id, "AFTER_SEQUENCE_NUMBER", last)
                if last
                else self._iterator(shard_id, "TRIM_HORIZON")
            )
            return []
        # handed on as the fast path's handler gets them from Lambda: plain dicts
        records = cast("list[dict[str, Any]]", response.get("Records", []))
        if records:
            self._last_seq[shard_id] = records[-1]["dynamodb"]["SequenceNumber"]
        following = response.get("NextShardIterator")
        if following:
            self._iterators[shard_id] = following
        else:  # the shard is closed and read to its end
            del self._iterators[shard_id]
        return records

    def _passes(self, record: Mapping[str, Any]) -> bool:
        return self._patterns is None or any(matches(p, record) for p in self._patterns)

    def _run(self) -> None:
        lower_current_thread()  # background work, like the poller: the executors' dispatchers come first
        next_refresh = 0.0
        gathered: list[dict[str, Any]] = []
        first_at = 0.0
        while not self._stop.is_set():
            try:
                if time.monotonic() >= next_refresh:
                    self._discover()
                    next_refresh = time.monotonic() + self._refresh_s
                for shard_id, iterator in list(self._iterators.items()):
                    records = self._read(shard_id, iterator)
                    self.records_seen += len(records)
                    passed = [r for r in records if self._passes(r)]
                    if passed and not gathered:
                        first_at = time.monotonic()
                    gathered.extend(passed)
            except Exception:  # DynamoDB Local restarting, a network blip: try again shortly
                log.exception("reading the table stream failed")
                self._stop.wait(1.0)
                continue
            waited = time.monotonic() - first_at
            if gathered and (waited >= self._batch_window_s or len(gathered) >= BATCH_MOST_RECORDS):
                batch, gathered = gathered, []
                self.records_passed += len(batch)
                try:
                    self._on_records(batch)
                except Exception:  # the poller finds these tasks in the index
                    log.exception("the fast path failed on %d stream records", len(batch))
            elif gathered:
                self._stop.wait(min(self._batch_window_s - waited, self._interval_s))
            else:
                self._stop.wait(self._interval_s)
