"""The client on DynamoDB, as users make it: :class:`Client` (``punctual.Client``) builds the store's parts from its
settings (:mod:`punctual.stores.dynamodb`) and hands the scheduling client (:class:`punctual.scheduling.client.Client`)
the ports it uses. Loaded when first named: ``import punctual`` loads neither boto3 nor the DynamoDB adapter."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from punctual.config.settings import Settings
from punctual.config.tenant_map import TenantMap
from punctual.domain.clock import Clock
from punctual.domain.model import Task
from punctual.scheduling import client as scheduling
from punctual.scheduling.quotas import QuotaGuard
from punctual.stores.dynamodb import DynamoStores, build_stores

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class Client(scheduling.Client):
    """Schedule tasks for Punctual to fire at an exact instant, straight to the DynamoDB table
    (:class:`punctual.scheduling.client.Client`'s methods, and :meth:`to_item` for plain boto3).

    Parameters
    ----------
    settings:
        Table name, endpoint, shard count and limits; defaults to ``Settings.from_env()``.
    dynamodb:
        A boto3 DynamoDB client to use (for example one bound to DynamoDB Local or moto).
    stores:
        The store's parts to use instead (the API's requests share one); ``dynamodb`` is then unused.
    clock, tenant_map, quota:
        As for :class:`punctual.scheduling.client.Client`.

    Examples
    --------
    >>> from punctual import Client, Settings
    >>> client = Client(Settings(endpoint_url="http://127.0.0.1:8765"))  # doctest: +SKIP
    """

    def __init__(  # noqa: PLR0913  the settings; every part keyword-only, each with a default a test may replace
        self,
        settings: Settings | None = None,
        *,
        dynamodb: DynamoDBClient | None = None,
        stores: DynamoStores | None = None,
        clock: Clock | None = None,
        tenant_map: TenantMap | None = None,
        quota: QuotaGuard | None = None,
    ) -> None:
        settings = settings or Settings.from_env()
        self.stores = stores if stores is not None else build_stores(settings, dynamodb)
        super().__init__(
            settings,
            self.stores.client,
            self.stores.schedules,
            clock=clock,
            tenant_map=tenant_map,
            quota=quota,
        )

    def to_item(self, task: Task, now_ms: int | None = None) -> dict[str, Any]:
        """The DynamoDB item of ``task`` (from :meth:`build_task`), for writing with plain boto3::

            client.put_item(TableName=table, Item=punctual_client.to_item(task),
                            ConditionExpression="attribute_not_exists(task_id)")

        The item is what :meth:`schedule` writes (its format is documented in :mod:`punctual.stores.dynamodb.codec`),
        with its due-index key and fast-path flag computed for ``now_ms`` (now by default): write it soon."""
        return self.stores.client.item_of(task, self.now_ms() if now_ms is None else now_ms)
