"""The benchmarks: drift against the bare dispatcher's floor, a cold executor, the executors' memory, scale, and
the pages and README figures made from their JSON.

``python -m punctual_tools.bench`` is the drift benchmark (``make bench``); each other benchmark runs as its own
module (``python -m punctual_tools.bench.scale``, ``.memory``, ``.coldstart``, ``.leads``, ``.pages``).
"""
