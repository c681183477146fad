"""Where tasks and schedules are kept: the store ports, their DynamoDB and in-memory implementations, the DLQ.

Services import the ports (:mod:`punctual.stores.ports`) and never an implementation; the wiring picks one.
"""
