"""Punctual's tooling: everything that runs on a laptop or in CI and never in Lambda.

The ``punctual`` package (``src/shared``, the Lambda layer) holds only what a handler imports. This package
holds the rest: the command line (``punctual``), the local runtime (DynamoDB Local, the local invoker, the
stream reader, the loopback target), the demo, the checker, the cost model, progress lines and statistics.
It imports ``punctual``; ``punctual`` never imports it.
"""
