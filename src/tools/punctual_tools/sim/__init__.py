"""A discrete-event simulation (SimPy) of Punctual's AWS side: poller reads, dispatch, Lambda's async queue,
scaling rate, concurrency and cold starts, the executors' CPU quota, DynamoDB partitions and index back-pressure.

:mod:`.params` holds the measured and cited parameters, :mod:`.components` each mechanism, :mod:`.model` a run,
:mod:`.calibrate` the model against the local benchmarks, :mod:`.page` docs/simulation.md; ``make simulate`` runs
:mod:`.__main__`.
"""
