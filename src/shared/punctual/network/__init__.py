"""Which network targets a webhook may reach: URLs and hosts as a resolver reads them, address classes, the policy."""
