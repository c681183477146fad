"""The web console: ``punctual console`` serves it on loopback (:mod:`punctual_tools.console.app`)."""
