"""What the handlers stand on: the wiring that builds the services from settings, the client on DynamoDB, and their
observability."""
