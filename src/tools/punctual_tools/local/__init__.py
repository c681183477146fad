"""The local runtime's infrastructure: DynamoDB Local, started from the jar that ``npm install`` fetched."""
