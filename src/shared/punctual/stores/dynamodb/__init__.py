"""The DynamoDB adapter of the store ports: the store and its parts, its item codec, and the table definition."""

from __future__ import annotations

from typing import Any

from punctual.config.clients import make_dynamodb_client
from punctual.config.settings import Settings
from punctual.stores.dynamodb.config import StoreConfig
from punctual.stores.dynamodb.store import DynamoTaskStore

__all__ = ["DynamoTaskStore", "StoreConfig", "build_store"]


def build_store(settings: Settings, dynamodb: Any = None) -> DynamoTaskStore:
    """The task store for these settings: DynamoDB (AWS, or ``settings.endpoint_url``), or the given client."""
    client = dynamodb if dynamodb is not None else make_dynamodb_client(settings)
    return DynamoTaskStore.from_settings(client, settings)
