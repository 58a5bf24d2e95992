"""A graph and its rescaled durations in -> replayed step times out (one-pass schedule); a
run's representative rank in -> its replay (the graph built or read from the graph cache)."""
