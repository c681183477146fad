"""Configuration: the validated settings, the tenant map, the CPU share a memory size buys, and boto3 clients."""
