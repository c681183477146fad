"""``python -m punctual_tools.bench``: the drift benchmark (:mod:`punctual_tools.bench.bench`), as ``make bench``
runs it."""

import sys

from punctual_tools.bench.bench import main

if __name__ == "__main__":  # the benchmark starts processes with spawn: they import this module, and must not run it
    sys.exit(main())
