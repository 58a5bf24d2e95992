"""A rank's graph in -> its wait edges out: cross-stream events, threads, a forward order."""
