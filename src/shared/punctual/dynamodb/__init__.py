"""The DynamoDB adapter of the store ports: the store and its parts, its item codec, and the table definition."""

from .config import StoreConfig
from .store import DynamoTaskStore

__all__ = ["DynamoTaskStore", "StoreConfig"]
