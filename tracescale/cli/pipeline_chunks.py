"""Inspect's reading of an interleaved pipeline: one rank's send/recv instances per neighbour
pair in, its model chunks per rank out (``replay.laws.interleave.chunk_reading``), and a run's
chunks from its ranks' readings.

Why inspect reads every rank and the replay one: inspect decodes every trace anyway, and only
the stages at the ends of the ring can tell (a middle stage's two neighbours carry equal
counts); the replay reads its representative stage, and a run where that is a middle stage
takes the other runs' reading (``replay.links.mesh``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from tracescale.classify.collectives import collective_type
from tracescale.ingest.groups import group_table
from tracescale.ingest.trace import RankTrace
from tracescale.replay.laws.interleave import chunk_reading


def trace_chunks(trace: RankTrace) -> tuple[bool, int | None]:
    """(whether the rank runs pipeline send/recv, its model chunks per rank where its counts
    tell): instances per pair group (two ranks), each counted on every event that carries it
    (the same factor for every pair: the reading is a ratio)."""
    ev = trace.events
    table = group_table(trace)
    idx = np.flatnonzero(table.of_event >= 0)
    group = table.of_event[idx].astype(np.int64)
    pair = np.array([g.size == 2 for g in table.groups], dtype=np.bool_)
    name = np.where(ev.coll_name[idx] >= 0, ev.coll_name[idx], ev.name[idx])
    p2p = trace.string_mask(lambda s: collective_type(s) == "sendrecv", steps_alike=True)
    keep = pair[group] & p2p[name]
    per_group = np.bincount(group[keep], minlength=len(table.groups))
    counts: dict[str, float] = {}
    for k, c in enumerate(per_group.tolist()):
        if c:
            key = table.groups[k].key
            counts[key] = counts.get(key, 0.0) + float(c)
    if not counts:
        return False, None
    return True, chunk_reading(counts)


def run_chunks(readings: Sequence[int | None]) -> int | None:
    """A run's model chunks per rank: the most common reading of the ranks that tell."""
    told = Counter(v for v in readings if v is not None)
    return told.most_common(1)[0][0] if told else None
