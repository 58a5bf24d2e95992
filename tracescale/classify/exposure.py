"""Per collective instance of one rank: how much of it its timeline shows as communication
(``exposed``) and how much compute could hide it (``hideable``), the two columns
classify/rank.py adds to the instances once the rank's timeline is cut.

Apart from rank.py because they read the finished timeline (``Segments``) and nothing else of
the attribution, and keep that module within a reader's reach.
"""

from __future__ import annotations

import numpy as np

from tracescale.classify.timeline import BOOL, CAT, I64, Segments
from tracescale.ingest.trace import RankTrace
from tracescale.table import Table


def hideable(trace: RankTrace, coll: Table, segs: Segments, work: BOOL, launched: I64) -> Table:
    """Per asynchronous instance: compute this rank ran between the instance's launch and the
    point where its compute waited for communication (the end of backward, in DDP).

    That is the compute that can hide this instance and the ones after it. The wait point is
    the end of the last compute launched before the step's last asynchronous instance was
    launched: later compute (the optimizer) waits for the collectives, so it hides nothing.
    """
    coll = coll.copy()
    coll["hideable"] = 0.0
    if coll.empty or not work.any():
        return coll
    ev = trace.events
    w_launch, w_end = launched[work], (ev.start + ev.dur)[work]
    order = np.argsort(w_launch, kind="stable")
    w_launch, w_end = w_launch[order], np.maximum.accumulate(w_end[order])
    compute = CAT["compute"]
    # Columns, not a groupby with a frame write per row (a tenth of the cost): per step, the
    # latest launch of its asynchronous instances, then each instance's hidden compute.
    rows = np.flatnonzero(coll["async"].to_numpy(dtype=np.bool_))
    step = coll["step"].to_numpy()[rows]
    ok = ~_isna(step)  # a groupby leaves out rows without a step
    rows, step = rows[ok], step[ok]
    if not len(rows):
        return coll
    steps, inv = np.unique(step, return_inverse=True)
    ready_ns = coll["ready_ns"].to_numpy()[rows]
    last = np.array([ready_ns[inv == g].max() for g in range(len(steps))])
    k = np.searchsorted(w_launch, last.astype(np.int64), side="left") - 1
    starts = coll["start_ns"].to_numpy()[rows]
    hide = coll["hideable"].to_numpy(dtype=np.float64).copy()
    for r, g, ready in zip(rows.tolist(), inv.tolist(), starts.tolist(), strict=True):
        if k[g] < 0:
            continue
        wait_at = int(w_end[k[g]])
        # From the instance's start on its stream: the host launches far ahead of the GPU, so
        # the launch time says nothing about when the data was ready; the start bounds it.
        hidden = segs.time_in(int(ready), wait_at)[compute] if wait_at > ready else 0.0
        hide[r] = float(hidden)
    coll["hideable"] = hide
    return coll


def exposed(coll: Table, segs: Segments) -> Table:
    """Seconds of each instance during which the rank's timeline says `communication`."""
    comm = CAT["communication"]
    exposed = [
        float(segs.time_in(int(s), int(e))[comm])
        for s, e in zip(coll["start_ns"], coll["end_ns"], strict=True)
    ]
    coll = coll.copy()
    coll["exposed"] = exposed
    return coll


def _isna(values: np.ndarray) -> BOOL:
    """Missing values (NaN or None) of a column, as ``pandas.isna``."""
    if values.dtype.kind == "f":
        return np.asarray(np.isnan(values), dtype=np.bool_)
    if values.dtype.kind == "O":
        return np.array([v is None or v != v for v in values.tolist()], dtype=np.bool_)
    return np.zeros(len(values), dtype=np.bool_)
