"""A fitted replay study + the projected world sizes in -> the overheads that grow with N, each a
line of seconds per step at each N, read from the same replayed steps as the projections.

Why from the replay: these lines answer "what does communication cost at 128 GPUs, and which
collective", beside the projected step they are part of. A second model fitted on category
totals (a ring term per type in N) printed 237 ms of AllGather and 237 ms more of
ReduceScatter at 128 GPUs for a replayed step of 152 ms: two answers, one impossible. Here each
collective type's line is the time the replayed step's device spends in that type's kernels
with no compute or copy running (its exposed part) in the step replayed without the waits for
the slowest rank, the pipeline's point-to-point waits are their own line, host-side
collectives the rest of the communication category, and the waits for the slowest rank
(``imbalance``) come from the same projections.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tracescale.replay.engine.schedule import replay
from tracescale.replay.imbalance import wait_overheads
from tracescale.replay.laws.p2p import p2p_rows
from tracescale.replay.project import ReplayStudy
from tracescale.replay.serial_parts import replayed_breakdown, step_comm_by_type

#: Collective types as the report names them.
LABELS = {
    "allreduce": "AllReduce",
    "allgather": "AllGather",
    "reducescatter": "ReduceScatter",
    "broadcast": "Broadcast",
    "alltoall": "AllToAll",
    "sendrecv": "SendRecv",
    "barrier": "Barrier",
    "other": "other collectives",
}
#: The line of a pipeline's send/recv kernels: a stage waiting on its neighbours (fill, drain,
#: their compute), of which the transfer itself is a small part.
P2P = "point-to-point (pipeline stages waiting on each other)"
#: The rest of the communication category: collectives run on the host (gloo, barriers).
HOST = "host-side collectives"


def _line(n: int, source: str, seconds: float, what: str | None = None) -> dict[str, Any]:
    return {
        "world_size": n,
        "category": "communication",
        "source": source,
        "seconds": seconds,
        "text": f"at N={n}, {what or source} adds {seconds * 1e3:.3g} ms per step",
    }


def _kinds(study: ReplayStudy) -> tuple[np.ndarray, list[str]]:
    """Per node of the base graph, the index of its line among the returned names (-1 none)."""
    coll = study.base.coll
    kind = np.full(len(study.base.graph), -1, dtype=np.int64)
    if not len(coll):
        return kind, []
    nodes = np.asarray(coll["node"], dtype=np.int64)
    types = np.asarray(coll["collective"]).astype(str)
    labels = np.array([LABELS.get(t, t) for t in types.tolist()], dtype=object)
    labels[np.asarray(p2p_rows(coll), dtype=np.bool_)] = P2P
    names = sorted(set(labels.tolist()))
    index = {name: i for i, name in enumerate(names)}
    ok = (nodes >= 0) & (nodes < len(kind))
    kind[nodes[ok]] = [index[x] for x in labels[ok].tolist()]
    return kind, names


def comm_lines(study: ReplayStudy, n: int) -> list[dict[str, Any]]:
    """The communication lines at ``n``: each collective type's exposed time, and the host-side
    rest of the category, in the step replayed without the waits for the slowest rank (those
    are their own lines: counted in a type's exposed time too, they would be counted twice).
    Mean over the kept steps, at the projected step's scale, as the projection's breakdown."""
    graph, kept = study.base.graph, study.base.kept
    dur, _, _ = study.split_durations(n)
    rep = replay(graph, dur)
    kind, names = _kinds(study)
    per_step = step_comm_by_type(graph, rep, kind, len(names))[kept]
    by_type = per_step.mean(axis=0) if len(per_step) else np.zeros(len(names))
    comm = replayed_breakdown(graph, rep, kept).get("communication", 0.0)
    total = sum(replayed_breakdown(graph, study.replay_at(n), kept).values())
    t = study.project(n).step_time_s
    scale = t / total if total > 0 else 0.0
    out = [
        _line(n, name, float(v) * scale)
        for name, v in sorted(zip(names, by_type.tolist(), strict=True), key=lambda x: -x[1])
        if v * scale > 1e-9
    ]
    rest = (comm - float(by_type.sum())) * scale
    if rest > 1e-9:
        out.append(_line(n, HOST, rest))
    return out


def replay_overheads(
    study: ReplayStudy, projections: Sequence[dict[str, Any]], measured_n: int | None = None
) -> list[dict[str, Any]]:
    """The ``overheads`` lines: per N (the largest measured one, then each projection's) the
    communication by collective type, then the waits for the slowest rank at the projected
    N (``imbalance.wait_overheads``, which also sets each projection's
    ``expert_imbalance_s``)."""
    sizes = [int(p["world_size"]) for p in projections]
    if measured_n is not None and measured_n not in sizes:
        sizes.insert(0, measured_n)
    waits = wait_overheads(study, projections)
    out: list[dict[str, Any]] = []
    for n in sizes:
        out.extend(comm_lines(study, n))
        out.extend(w for w in waits if int(w["world_size"]) == n)
    return out
