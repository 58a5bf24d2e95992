"""Ingest: trace files on disk -> per-rank columnar traces, steps, and runs of a study.

The names below load on first use: discovery (file heads only) must not pay for the decoders
and pandas, so a cached ``analyze`` starts fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracescale.ingest.decode import load_trace
    from tracescale.ingest.trace import EventColumns, RankTrace, TraceMeta

__all__ = ["EventColumns", "RankTrace", "TraceMeta", "load_trace"]


def __getattr__(name: str) -> Any:
    if name == "load_trace":
        from tracescale.ingest.decode import load_trace

        return load_trace
    if name in ("EventColumns", "RankTrace", "TraceMeta"):
        from tracescale.ingest import trace

        return getattr(trace, name)
    raise AttributeError(f"module 'tracescale.ingest' has no attribute {name!r}")
