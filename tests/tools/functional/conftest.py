"""The tooling's functional tests: the local runtime's parts, the cost model, the plan and ``punctual verify`` on
moto, with the table and settings of the runtime's functional tier."""

from __future__ import annotations

from moto_table import dynamodb, now_ms, read_raw, settings

__all__ = ["dynamodb", "now_ms", "read_raw", "settings"]  # fixtures, found by pytest in this module's namespace
