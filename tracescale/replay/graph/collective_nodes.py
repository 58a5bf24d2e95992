"""Collective events of a rank -> their instance rows, message bytes and NCCL algorithm.

Why apart from the graph build: these are the joins between what classify found (the rank's
collective instances) and the graph's nodes, and the reading of NCCL's kernel names; the build
only places the nodes.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import numpy.typing as npt

from tracescale.classify.collectives import dtype_bytes
from tracescale.ingest.trace import RankTrace

I64 = npt.NDArray[np.int64]

#: NCCL spells algorithm and protocol as upper-case tokens between underscores (or before the
#: argument list): anchored and case-sensitive, so the "ll" of "AllReduce" is no protocol.
_ALGO = re.compile(
    r"_(RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|COLLNET|NVLS_TREE|NVLS|PAT)(?=_|\(|$)"
)
_PROTO = re.compile(r"_(LL128|LL|SIMPLE)(?=_|\(|$)")


def algo_of(kernel_name: str) -> str:
    """``RING_LL`` style label from an NCCL kernel name ('' when it carries none)."""
    a, p = _ALGO.search(kernel_name), _PROTO.search(kernel_name)
    return "_".join(x.group(1) for x in (a, p) if x is not None)


def collective_events(ev_start: I64, ev_end: I64, coll: Any) -> I64:
    """Row of the rank's collective instances whose (start_ns, end_ns) an event has, -1 else
    (a repeated pair: the last row)."""
    n = len(ev_start)
    out = np.full(n, -1, dtype=np.int64)
    if len(coll) == 0:
        return out
    cs = coll["start_ns"].to_numpy(dtype=np.int64)
    ce = coll["end_ns"].to_numpy(dtype=np.int64)
    order = np.lexsort((np.arange(len(cs)), ce, cs))
    cs, ce, rows = cs[order], ce[order], order.astype(np.int64)
    lo = np.searchsorted(cs, ev_start, side="left")
    hi = np.searchsorted(cs, ev_start, side="right")
    one = np.flatnonzero(hi - lo == 1)
    hit = one[ce[lo[one]] == ev_end[one]]
    out[hit] = rows[lo[hit]]
    for i in np.flatnonzero(hi - lo > 1).tolist():  # several instances start together
        same = np.flatnonzero(ce[lo[i] : hi[i]] == ev_end[i])
        if len(same):
            out[i] = rows[lo[i] + same[-1]]
    return out


def message_bytes(trace: RankTrace, events: list[int]) -> list[int]:
    """Bytes per collective event from max(In, Out) nelems of its record_param_comms source.

    AllGather records the shard as In and the full tensor as Out; ReduceScatter the reverse:
    the ring moves (g-1)/g of the larger one, so the larger one is the message.
    """
    ev = trace.events
    by_ext: dict[int, int] = {}
    for i in np.flatnonzero(~ev.is_device & (ev.coll_name >= 0) & (ev.external_id >= 0)).tolist():
        by_ext[int(ev.external_id[i])] = i
    corr_ext: dict[int, int] = {}
    launches = np.flatnonzero(~ev.is_device & (ev.correlation >= 0) & (ev.external_id >= 0))
    for i in launches.tolist():
        corr_ext[int(ev.correlation[i])] = int(ev.external_id[i])
    out: list[int] = []
    for i in events:
        src = i
        if ev.coll_name[i] < 0 or max(ev.in_nelems[i], ev.out_nelems[i]) < 0:
            ext = int(ev.external_id[i])
            if ext not in by_ext:
                ext = corr_ext.get(int(ev.correlation[i]), -1)
            src = by_ext.get(ext, i)
        nel = max(int(ev.in_nelems[src]), int(ev.out_nelems[src]))
        dt = trace.strings[ev.dtype[src]] if ev.dtype[src] >= 0 else "float"
        out.append(nel * dtype_bytes(dt) if nel >= 0 else -1)
    return out
