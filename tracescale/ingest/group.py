"""Load the rank files of one run folder: one :class:`RankTrace` per rank.

Discovery only reads file heads, so a rank that appears in two files (TensorBoard-plugin naming
``worker0.<time>.pt.trace.json``: successive profiling windows of one process) is checked here,
where the time spans are known: windows that do not overlap are merged into one trace (their
steps are pooled); overlapping ones are two different processes claiming one rank, an error.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracescale.errors import InvalidTraceError
from tracescale.ingest.build import STRING_COLUMNS
from tracescale.ingest.decode import DEFAULT_MEMORY_BUDGET, load_trace
from tracescale.ingest.discover import RankFile, RunGroup
from tracescale.ingest.plausible import NESTED_TOO_DEEPLY, vet
from tracescale.ingest.trace import EventColumns, RankTrace, TraceMeta

OnError = Callable[[RankFile, InvalidTraceError], None]
#: Told the rank and its windows (sorted by start) whenever several files are merged into one.
OnMerge = Callable[[int, list[RankTrace]], None]


def pooled_windows_note(rank: int, windows: Sequence[Any]) -> str:
    """The note for successive profiling windows pooled as one rank: every file and each gap.

    ``windows``: :class:`RankTrace` objects (``meta.path``, ``span_ns``) or
    ``(path, start_ns, end_ns)`` tuples, in any order. Pooling is right for one process profiled
    twice (the steps of both windows are the same job), but the time between them was not
    traced, so the user should know the span is not one stretch of training.
    """
    spans = sorted((w if isinstance(w, tuple) else (w.meta.path, *w.span_ns)) for w in windows)
    spans = sorted(spans, key=lambda p: p[1])
    files = ", ".join(os.path.basename(str(p)) for p, _, _ in spans)
    gaps = [f"{(b[1] - a[2]) / 1e9:.3g} s" for a, b in itertools.pairwise(spans)]
    return (
        f"rank {rank}: {len(spans)} successive profiling windows pooled as one process: "
        f"{files}; untraced gap{'s' if len(gaps) > 1 else ''} between them {', '.join(gaps)}"
    )


def load_checked(path: str, *, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> RankTrace:
    """:func:`load_trace` plus :func:`~tracescale.ingest.plausible.vet`; JSON nested deeper
    than the parser's recursion limit is an invalid trace too, not a crash."""
    try:
        return vet(load_trace(path, memory_budget=memory_budget))
    except RecursionError as exc:
        raise InvalidTraceError(NESTED_TOO_DEEPLY, path=path) from exc


def load_group(
    group: RunGroup,
    *,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    on_error: OnError | None = None,
    on_merge: OnMerge | None = None,
) -> list[RankTrace]:
    """One trace per rank, sorted by rank; successive windows of a rank merged.

    A bad file raises :class:`InvalidTraceError`, or, with ``on_error``, is reported there and
    left out (a multi-file run is analyzed without it). Overlapping windows of one rank always
    raise: which file is right cannot be guessed. ``on_merge`` hears of every merge.
    """
    by_rank: dict[int, list[RankTrace]] = {}
    for rf in group.files:
        try:
            trace = load_checked(rf.path, memory_budget=memory_budget)
        except InvalidTraceError as exc:
            if on_error is None:
                raise
            on_error(rf, exc)
            continue
        by_rank.setdefault(rf.rank, []).append(trace)
    merged = [merge_windows(by_rank[r], rank=r) for r in sorted(by_rank)]
    if on_merge is not None:
        for r in sorted(by_rank):
            if len(by_rank[r]) > 1:
                on_merge(r, check_windows(by_rank[r]))
    return merged


def check_windows(traces: list[RankTrace]) -> list[RankTrace]:
    """The traces sorted by start; raises naming both files when two spans overlap."""
    spans = sorted(((t.span_ns, t) for t in traces), key=lambda p: p[0])
    for (a_span, a), (b_span, b) in itertools.pairwise(spans):
        if b_span[0] < a_span[1]:
            raise InvalidTraceError(
                f"rank {a.meta.rank if a.meta.rank is not None else '?'} appears twice with "
                f"overlapping time spans: {os.path.basename(a.meta.path)} and "
                f"{os.path.basename(b.meta.path)} (two processes cannot be one rank)",
                path=b.meta.path,
            )
    return [t for _, t in spans]


def merge_windows(traces: list[RankTrace], *, rank: int | None = None) -> RankTrace:
    """Successive, non-overlapping windows of one process as one trace (string ids remapped)."""
    if len(traces) == 1:
        return traces[0]
    ordered = check_windows(traces)
    table: dict[str, int] = {}
    labels: dict[str, int] = {}
    parts: list[EventColumns] = []
    for t in ordered:
        remap = np.array([table.setdefault(s, len(table)) for s in t.strings], dtype=np.int32)
        pid_map = {
            old: labels.setdefault(name, -(len(labels) + 1)) for old, name in t.pid_names.items()
        }
        cols = {}
        for key, col in t.events.__dict__.items():
            if key in STRING_COLUMNS:
                col = np.where(col >= 0, remap[np.clip(col, 0, None)], col).astype(np.int32)
            elif key in ("pid", "tid") and pid_map:
                col = col.copy()
                for old, new in pid_map.items():
                    col[t.events.__dict__[key] == old] = new
            cols[key] = col
        parts.append(EventColumns(**cols))
    merged = EventColumns(
        **{k: np.concatenate([p.__dict__[k] for p in parts]) for k in parts[0].__dict__}
    )
    merged = merged.take(np.argsort(merged.start, kind="stable"))
    first = ordered[0].meta
    skipped: dict[str, int] = {}
    for t in ordered:
        for k, v in t.meta.skipped.items():
            skipped[k] = skipped.get(k, 0) + v
    meta = TraceMeta(
        **{
            **first.__dict__,
            "rank": first.rank if first.rank is not None else rank,
            "size_bytes": sum(t.meta.size_bytes for t in ordered),
            "total_events": sum(t.meta.total_events for t in ordered),
            "skipped": skipped,
            "thread_names": {k: v for t in ordered for k, v in t.meta.thread_names.items()},
        }
    )
    return RankTrace(
        meta=meta,
        strings=tuple(table),
        events=merged,
        pid_names={v: k for k, v in labels.items()},
    )
