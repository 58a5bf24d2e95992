"""Per-rank delays and arrival offsets in -> slowest-of-N lateness, tails, 90% intervals out."""
