"""The DynamoDB adapter of the store port: the store, its item codec, and the table definition."""

from .store import DynamoTaskStore

__all__ = ["DynamoTaskStore"]
