"""The domain: tasks and schedules, their keys and owners, and the pure decisions about them (no I/O).

Everything else builds on it and it imports nothing of Punctual but :mod:`punctual.errors`.
"""
