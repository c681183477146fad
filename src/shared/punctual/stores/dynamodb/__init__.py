"""The DynamoDB adapter of the store ports (:mod:`punctual.stores.ports`): the only package that speaks DynamoDB.

:class:`DynamoStores` is the record of its parts, each of one concern, each implementing its port directly:

* :mod:`.due`: the sparse ``due`` index, the candidates it names, each poll group's watermark and poll start
  (:class:`~punctual.stores.ports.DispatchPort`);
* :mod:`.executors`: heartbeats, fences, the arms and takeovers by which an executor owns its tasks, and the writes
  that end its hold: record, retry, release (:class:`~punctual.stores.ports.FiringPort`);
* :mod:`.tasks` (with :mod:`.tenants`): task items: create, read, cancel, reschedule, redrive, quarantine, and a
  tenant's keys, pages and active count (:class:`~punctual.stores.ports.ClientPort`);
* :mod:`.schedules` (with :mod:`.usage`): recurring schedules, their chain of occurrences, and what a tenant's
  schedules hold of its quotas (:class:`~punctual.stores.ports.SchedulePort`);
* :mod:`.writes`: the kinds of conditional write, the conditions that guard the task life cycle (its diagram is
  drawn there), and how many writes are sent at once (single UpdateItems or transactions).

They share one :class:`~punctual.stores.dynamodb.table.Table` (the client, the thread pool, reads by key) and one
:class:`~punctual.stores.dynamodb.config.StoreConfig`, derived from :class:`~punctual.config.settings.Settings`. Items
are encoded by :mod:`.codec`; the table and its indexes are defined in ``template.yaml`` (:mod:`.schema`).

A task written due sooner than the next poll can dispatch it (``due_ms - now < poll interval + margin``)
carries ``fast_path = 1``: the table stream hands it to the fast path, which dispatches it like the poller
does unless the next poll does so in time (:meth:`DueIndex.last_polls <.due.DueIndex.last_polls>`). The ARM
condition makes the two race-safe; the poller still finds the task in the index if the fast path does not dispatch
it. A stream image is decoded by :func:`.codec.candidate_of_item`, which the wiring hands the fast path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from punctual.config.clients import make_dynamodb_client
from punctual.config.settings import Settings
from punctual.stores.dynamodb.config import StoreConfig
from punctual.stores.dynamodb.due import DueIndex
from punctual.stores.dynamodb.executors import Executors
from punctual.stores.dynamodb.schedules import ScheduleItems
from punctual.stores.dynamodb.table import Table
from punctual.stores.dynamodb.tasks import TaskItems
from punctual.stores.dynamodb.writes import Writes

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["DynamoStores", "StoreConfig", "build_stores"]


@dataclass(frozen=True)
class DynamoStores:
    """The adapter's parts on one table: ``dispatch``, ``firing``, ``client`` and ``schedules`` are its ports
    (:class:`~punctual.stores.ports.Stores`); ``table`` and ``config`` are for tooling and the adapter's own tests.

    Built by :meth:`on` from a boto3 DynamoDB *client* (low level: AWS, DynamoDB Local or moto alike) and a
    :class:`StoreConfig`, or by :func:`build_stores` from settings.
    """

    table: Table
    config: StoreConfig
    dispatch: DueIndex
    firing: Executors
    client: TaskItems
    schedules: ScheduleItems

    @classmethod
    def on(cls, client: DynamoDBClient, config: StoreConfig) -> DynamoStores:
        """The parts on ``client``, sharing one table (its thread pool) and one set of writes."""
        table = Table(client, config)
        writes = Writes(table)
        tasks = TaskItems(table, writes)
        executors = Executors(table, writes, tasks)
        return cls(
            table=table,
            config=config,
            dispatch=DueIndex(table, tasks, executors),
            firing=executors,
            client=tasks,
            schedules=ScheduleItems(table, tasks),
        )

    @classmethod
    def from_settings(cls, client: DynamoDBClient, settings: Settings) -> DynamoStores:
        """The parts on ``client`` configured by ``settings``."""
        return cls.on(client, StoreConfig.from_settings(settings))


def build_stores(settings: Settings, dynamodb: DynamoDBClient | None = None) -> DynamoStores:
    """The store for these settings: DynamoDB (AWS, or ``settings.endpoint_url``), or the given client."""
    client = dynamodb if dynamodb is not None else make_dynamodb_client(settings)
    return DynamoStores.from_settings(client, settings)
