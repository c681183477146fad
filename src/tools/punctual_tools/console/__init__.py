"""The web console: ``punctual console`` serves it on loopback; its pages read and steer through one port,
:class:`~punctual_tools.console.model.ConsoleSource` (:mod:`punctual_tools.console.source` implements it)."""
