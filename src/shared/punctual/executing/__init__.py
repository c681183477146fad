"""Firing: arm a batch, fire each task at its instant on a dispatcher thread, record the outcomes, keep a heartbeat."""
