"""Ingest: trace files on disk -> per-rank columnar traces, steps, and runs of a study."""

from tracescale.ingest.decode import load_trace
from tracescale.ingest.trace import EventColumns, RankTrace, TraceMeta

__all__ = ["EventColumns", "RankTrace", "TraceMeta", "load_trace"]
