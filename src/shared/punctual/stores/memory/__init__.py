"""The store ports (:mod:`punctual.stores.ports`) in memory: every rule the ports state, in one process, no database.

It passes the same contract suites as the DynamoDB store, which shows that the ports speak of the domain and not
of DynamoDB, and it is the store of tests that need a store but not DynamoDB's behaviour.

* :mod:`.store`: :class:`InMemoryStore`, both ports under one lock;
* :mod:`.records`: a task as stored, with its life-cycle fields, and an executor's heartbeat;
* :mod:`.index`: the due index (minutes, shards, poll groups' watermarks and poll starts).
"""

from punctual.stores.memory.store import InMemoryStore

__all__ = ["InMemoryStore"]
