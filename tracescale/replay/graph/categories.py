"""Graph nodes + the rank's trace and rules -> the attribution category of each node.

Why: a what-if scenario ("data loading free", "communication twice as fast") is a graph
transformation (Daydream): the nodes of one category are rescaled and the graph replayed, so
overlap and waits come out as the replay sees them. The category of a node is the one the
classify stage gives the instant it runs at, by the same rules: kernels by the device rules
(compute, memcpy, communication), collective nodes communication, sync calls sync, and host
pieces of the main thread by the host op that encloses them (data loading, sync, single-rank
reduction, host-side communication, in classify's priority), else host; in a GPU trace a piece
inside no traced op of the process is idle, as classify has it (a "host" what-if must not free
untraced time: on a torch.compile trace 354 ms of it made removing 1.4 ms of host work a
1,876x lever); in a CPU-only trace a piece inside a framework op is compute, as classify
has it (the host lever freed the ops' own work too: 11x for 63% of the step). Other
threads' pieces are host (classify attributes only the main thread's host time).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tracescale.classify.rules import DEVICE_TARGETS, HOST_TARGETS, RuleSet, classify_events
from tracescale.classify.timeline import CAT, in_union
from tracescale.ingest.trace import RankTrace

I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]

#: Event categories of framework ops (classify's: a CPU-only trace's compute is their time).
_OP_CATS = ("cpu_op", "Operator")
#: Host rule targets in classify's priority order (the first covering op wins).
_HOST_ORDER = ("dataloader", "sync", "reduction", "communication")
#: Device rule targets that are categories (compute, memcpy, communication); wait/ignore: -1.
_DEVICE_CODES = np.array([CAT.get(t, -1) for t in DEVICE_TARGETS], dtype=np.int8)


def node_categories(
    trace: RankTrace,
    rules: RuleSet,
    kind: npt.NDArray[np.int8],
    event: I64,
    res: npt.NDArray[np.int32],
    start: I64,
    dur: I64,
    main: tuple[int, int],
    main_res: int,
    kinds: dict[str, int],
) -> I8:
    """Category index (``CATEGORIES``) per node, -1 for device work the rules call a wait.

    ``main``: the main thread's (pid, tid), resource ``main_res`` of the graph. ``kinds``:
    the graph's node kind codes by name (``gap``, ``call``, ``sync``, ``host_collective``,
    ``device``, ``device_collective``)."""
    ev = trace.events
    strings = trace.strings
    n = len(kind)
    out = np.full(n, CAT["host"], dtype=np.int8)
    dev = kind == kinds["device"]
    if dev.any():
        dev_t = classify_events(
            rules.device, DEVICE_TARGETS, strings, ev.name, ev.cat, step_names=trace.step_names
        )
        t = dev_t[np.clip(event[dev], 0, None)]
        out[dev] = np.where(t >= 0, _DEVICE_CODES[np.clip(t, 0, None)], -1)
    on_main = (res == main_res) & ~dev & (kind != kinds["device_collective"])
    if on_main.any():
        host = ~ev.is_device & (ev.pid == main[0]) & (ev.tid == main[1])
        host_t = classify_events(
            rules.host, HOST_TARGETS, strings, ev.name, ev.cat, step_names=trace.step_names
        )
        idx = np.flatnonzero(on_main)
        mid = start[idx] + dur[idx] // 2
        todo = np.ones(len(idx), dtype=np.bool_)
        for target in _HOST_ORDER:
            m = host & (host_t == HOST_TARGETS.index(target))
            hit = todo & in_union(ev.start[m], ev.start[m] + ev.dur[m], mid)
            out[idx[hit]] = CAT[target]
            todo &= ~hit
        if dev.any():  # a GPU trace: main-thread time inside no traced op is idle (classify)
            gaps = todo & (kind[idx] == kinds["gap"])
            steps = trace.step_names[np.clip(ev.name, 0, None)] & (ev.name >= 0)
            ops = ~ev.is_device & (ev.pid == main[0]) & ~steps & (ev.dur > 0)
            inside = in_union(ev.start[ops], ev.start[ops] + ev.dur[ops], mid[gaps])
            out[idx[gaps][~inside]] = CAT["idle"]
        else:  # CPU-only (gloo): the main thread's ops are its compute, untraced time host
            op_cats = [trace.string_id(c) for c in _OP_CATS]
            ops = host & np.isin(ev.cat, np.array(op_cats, dtype=np.int32)) & (ev.dur > 0)
            inside = todo & in_union(ev.start[ops], ev.start[ops] + ev.dur[ops], mid)
            out[idx[inside]] = CAT["compute"]
    out[kind == kinds["sync"]] = CAT["sync"]
    out[(kind == kinds["host_collective"]) | (kind == kinds["device_collective"])] = CAT[
        "communication"
    ]
    return out
