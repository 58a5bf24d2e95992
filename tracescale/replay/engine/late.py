"""A step's late rank carried through the step: the slowest rank's lateness, waited for at the
first collective a host delay reaches, is an earliest start for every later collective of that
step, and the graph is replayed twice to place it.

Why: a rank that loads its batch D late launches everything D late, so every collective of
the step meets it D late until the ranks realign. Waiting once, at the first collective, is
right where that collective blocks the compute stream (FSDP's AllGather, tensor parallel),
since everything after it then runs late. A DDP bucket's AllReduce runs beside the backward
instead: its wait delayed only the communication stream, the next buckets started at their
own ready times, and the backward still running hid the lateness. The slowest of 4 ranks'
~10 ms delay was mostly lost and the step projected 12% short at a measured N.

The rule: replay once without the host-delay waits, for each later collective's offset from
the step's first-reached one; then again, each later collective starting no earlier than
that offset plus the step's lateness after the first-reached one was ready. A rank whose own
work already runs late because it waited is not delayed twice (its own start already holds
the lateness); a collective queued behind a delayed one starts when that one ends, as the
late rank's does.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tracescale.replay.engine.schedule import Replayed, replay
from tracescale.replay.graph.build import Graph

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]


def late_waits(
    graph: Graph,
    nodes: I64,
    positions: I64,
    host: F64,
    first: int | None,
    eligible: BOOL,
    joined: F64 | None = None,
) -> tuple[I64, F64]:
    """Per graph node, the step's first-reached collective it is anchored to (-1: none) and
    the step's host-delay lateness (seconds): at the first-reached node itself, and carried
    to each later collective of its step.

    ``nodes``/``positions``/``host``: the collectives' nodes, positions in the step and the
    part of their wait that is the ranks' host delays (the rest, device jitter and a late
    rank's systematic offset, is measured at every position and waited for there);
    ``first``: the position where a step's host delay is waited for (None: none is);
    ``eligible``: collectives that wait for a slowest rank (not the pipeline's
    point-to-point transfers, not groups of one); ``joined``: per collective, how much later
    still the slowest of the groups joined by then arrives (``arrivals.slowest_rank``), added
    to the lateness carried to it."""
    anchor = np.full(len(graph), -1, dtype=np.int64)
    late = np.zeros(len(graph))
    if first is None or not len(nodes):
        return anchor, late
    step = graph.step[nodes]
    is_first = eligible & (positions == first) & (step >= 0) & (host > 0)
    if not is_first.any():
        return anchor, late
    per_step = np.full(len(graph.step_first), -1, dtype=np.int64)
    per_step[step[is_first]] = np.arange(len(nodes))[is_first]
    later = eligible & (positions > first) & (step >= 0)
    later &= per_step[np.clip(step, 0, None)] >= 0
    row = per_step[step[later]]
    anchor[nodes[later]] = nodes[row]
    late[nodes[later]] = host[row] + (joined[later] if joined is not None else 0.0)
    late[nodes[is_first]] = host[is_first]
    return anchor, late


def replay_late(graph: Graph, dur: F64, pre: F64, anchor: I64, late: F64) -> Replayed:
    """The graph replayed with ``pre`` and each step's lateness carried (module docstring)."""
    later = anchor >= 0
    if not later.any():
        return replay(graph, dur, pre)
    first = np.zeros(len(graph), dtype=np.bool_)
    first[anchor[later]] = True
    own = np.where(first, pre - late, pre)  # the host delay's part taken out: the step undelayed
    start0 = replay(graph, dur, own).start
    a = np.clip(anchor, 0, None)
    ready0 = start0[a] - own[a]  # when the first-reached collective's predecessors were done
    off = np.where(later, start0 - ready0 + late, 0.0)
    return replay(graph, dur, pre, anchor, off)
