"""Per-run node-group tables in -> each group's law in N out (compute, host, alpha-beta links)."""
