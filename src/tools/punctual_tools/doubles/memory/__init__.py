"""The store ports (:mod:`punctual.stores.ports`) in memory, a test double of the tooling (never in the Lambda
layer): every rule the ports state, in one process, no database.

It passes the same contract suites as the DynamoDB store, which shows that the ports speak of the domain and not
of DynamoDB, and it is the store of tests that need a store but not DynamoDB's behaviour.

* :mod:`.store`: :class:`InMemoryStore`, every port under one lock;
* :mod:`.records`: a task as stored, with its life-cycle fields, and an executor's heartbeat;
* :mod:`.index`: the due index (minutes, shards, poll groups' watermarks and poll starts).
"""

from punctual_tools.doubles.memory.store import InMemoryStore

__all__ = ["InMemoryStore"]
