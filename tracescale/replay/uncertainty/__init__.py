"""Per-rank delays pooled over runs in -> their fitted tail, slowest-of-N, intervals out."""
