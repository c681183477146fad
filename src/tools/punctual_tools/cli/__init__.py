"""The ``punctual`` command: a module per group of verbs, and :mod:`punctual_tools.cli.parser`, which builds the
parser from them and runs a command (``main``, the ``punctual`` entry point)."""

from punctual_tools.cli.parser import build_parser, main

__all__ = ["build_parser", "main"]
