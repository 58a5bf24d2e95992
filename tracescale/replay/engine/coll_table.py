"""The representative rank's collective nodes as the projection reads them (``RunReplay.coll``).

Apart from run.py to keep that module within a reader's reach: one row per collective node of
the replay graph, joined to the run's arrival offsets (``variability.arrival_offsets``) by
(process group, collective, seq), columns filled where the run had no reading.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracescale.replay.graph.build import Graph
from tracescale.table import Table, text

#: Columns taken from the run's arrival offsets, in this order.
_PARTS = (
    "transfer", "wait", "offset", "position", "systematic", "host", "rest", "own_delay", "joins",
)  # fmt: skip
_KEY = ("pg", "collective", "seq")


def replay_collectives(gc: Table, own: Table, mine: Table, graph: Graph) -> Table:
    """``gc``: the graph's collective nodes; ``own``: the rank's collective instances (rows
    ``gc.row``); ``mine``: the rank's rows of the run's arrival offsets."""
    rows = gc.col("row") if len(gc) else np.zeros(0, dtype=np.int64)
    info = own.take(rows.astype(np.int64))
    gbytes = gc.col("bytes") if len(gc) else np.zeros(0, dtype=np.int64)
    coll = Table(
        {
            "node": gc.col("node") if len(gc) else np.zeros(0, dtype=np.int64),
            "collective": info.col("collective"),
            "seq": info.col("seq"),
            "pg": text(info, "pg") if "pg" in info else "",
            "group": info.col("group_size"),
            "bytes": np.where(gbytes >= 0, gbytes, info.col("bytes")),
            "algo": gc.col("algo") if len(gc) else np.zeros(0, dtype=object),
        }
    )
    if len(coll) and len(mine):
        coll = _left_join(coll, mine, [p for p in _PARTS if p in mine])
    for col in ("transfer", "wait", "offset", "systematic", "host", "rest", "own_delay", "joins"):
        if col not in coll:
            coll[col] = np.full(len(coll), np.nan)
    # unread: a group other than the first's joins as many groups as it has members
    coll["joins"] = np.where(np.isnan(coll.col("joins").astype(np.float64)), 1.0, coll.col("joins"))
    if "position" not in coll:
        coll["position"] = np.full(len(coll), -1, dtype=np.int64)
    node = coll.col("node").astype(np.int64)
    dur = graph.dur[node] / 1e9 if len(coll) else np.zeros(0)
    transfer = coll.col("transfer").astype(np.float64)
    coll["transfer"] = np.where(np.isnan(transfer), dur, transfer)
    if len(coll):
        coll["wait"] = np.maximum(dur - coll.col("transfer"), 0)
    position = coll.col("position").astype(np.float64)
    coll["position"] = np.where(np.isnan(position), -1, position).astype(np.int64)
    for col in ("offset", "systematic", "host", "rest", "own_delay"):
        values = coll.col(col).astype(np.float64)
        coll[col] = np.where(np.isnan(values), 0.0, values)
    return coll


def _left_join(left: Table, right: Table, columns: list[str]) -> Table:
    """``left`` with ``right``'s ``columns`` where (pg, collective, seq) match (NaN where none;
    a key ``right`` holds twice repeats the left row, as a frame's join does)."""
    at: dict[tuple[Any, ...], list[int]] = {}
    keys = zip(*(_key_values(right, k) for k in _KEY), strict=True)
    for i, k in enumerate(keys):
        at.setdefault(k, []).append(i)
    take: list[int] = []
    src: list[int] = []
    for i, k in enumerate(zip(*(_key_values(left, k) for k in _KEY), strict=True)):
        for j in at.get(k, [-1]):
            take.append(i)
            src.append(j)
    out = left.take(np.array(take, dtype=np.int64))
    src_idx = np.array(src, dtype=np.int64)
    hit = src_idx >= 0
    for c in columns:
        values = np.full(len(src_idx), np.nan)
        values[hit] = right.col(c)[src_idx[hit]]
        out[c] = values
    return out


def _key_values(table: Table, name: str) -> list[Any]:
    values: list[Any] = (text(table, name) if name == "pg" else table.col(name)).tolist()
    return values
