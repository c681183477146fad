"""What the handlers stand on: the wiring that builds the services from settings, and their observability."""
