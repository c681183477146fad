"""``python -m punctual_tools.cli``: the ``punctual`` command."""

import sys

from punctual_tools.cli.parser import main

sys.exit(main())
