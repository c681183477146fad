"""Where tasks and schedules are kept: the store ports, their DynamoDB adapter, the DLQ.

Services import the ports (:mod:`punctual.stores.ports`) and never an adapter; the wiring builds the adapter's parts
(:class:`punctual.stores.dynamodb.DynamoStores`) and hands each service the ports it uses. The in-memory double of
the ports is the tooling's (``punctual_tools.doubles.memory``): tests use it, Lambda never loads it.
"""
