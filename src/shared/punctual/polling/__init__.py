"""Finding what is due: the poller, the short-lead fast path, and the port that hands a batch to an executor."""
