"""A graph and its rescaled durations in -> replayed step times out (one-pass schedule)."""
