"""Putting work in: the client (straight to the table, or through the REST API), recurring schedules' chains,
tenant quotas and redrive."""
