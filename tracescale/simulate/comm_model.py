"""Collective cost and NCCL kernel names for the pattern simulator: (type, bytes, N) -> ns.

Why a model of its own: the patterns exercise what one alpha-beta line cannot represent, so the
cost depends on the collective type, on the algorithm and protocol NCCL would pick for the
message size (and that choice is visible in the kernel name, as in real traces), and on the
topology tier: a ring that spans nodes moves every chunk over the slowest link, so it runs at
the inter-node latency and bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tracescale.simulate.params import SimParams

#: protocol by message size (bytes below the bound), and its share of the link bandwidth
PROTOCOLS: tuple[tuple[str, float, float], ...] = (
    ("LL", 65_536, 0.5),
    ("LL128", 8_388_608, 0.9),
    ("SIMPLE", math.inf, 1.0),
)
#: AllReduce below this size runs as a tree (latency 2*ceil(log2 N) hops instead of 2(N-1))
TREE_BELOW = 1_048_576

#: collective name as ``record_param_comms`` writes it -> kernel name stem
STEMS = {
    "allreduce": "AllReduce",
    "allgather": "AllGather",
    "reduce_scatter": "ReduceScatter",
    "broadcast": "Broadcast",
    "alltoall": "SendRecv",
}
ANNOTATIONS = {
    "allreduce": "nccl:all_reduce",
    "allgather": "nccl:_all_gather_base",
    "reduce_scatter": "nccl:_reduce_scatter_base",
    "broadcast": "nccl:broadcast",
    "alltoall": "nccl:all_to_all",
}


@dataclass(frozen=True)
class Link:
    """Latency per hop (s) and bandwidth (B/s) of the slowest link a ring crosses."""

    alpha: float
    bandwidth: float


def link(params: SimParams, n: int, coll: str, spans: bool | None = None) -> Link:
    """Intra-node link while the group fits one node (``spans`` says so for a group that is
    not the first ``n`` ranks), else the inter-node one."""
    alpha = params.bcast_alpha if coll == "broadcast" else params.alpha
    if not (n > params.gpus_per_node if spans is None else spans):
        return Link(alpha, params.bandwidth)
    inter_alpha = params.inter_alpha or params.alpha
    inter_bw = params.inter_bandwidth or params.bandwidth
    return Link(max(alpha, inter_alpha), min(params.bandwidth, inter_bw))


def protocol(nbytes: int) -> tuple[str, float]:
    """NCCL's protocol for a message of ``nbytes`` and its bandwidth efficiency."""
    for name, bound, share in PROTOCOLS:
        if nbytes < bound:
            return name, share
    raise AssertionError("unreachable: the last bound is infinite")


def algorithm(coll: str, nbytes: int) -> str:
    return "TREE" if coll == "allreduce" and nbytes < TREE_BELOW else "RING"


def transfer_seconds(
    params: SimParams, n: int, coll: str, full_bytes: int, spans: bool | None = None
) -> float:
    """Transfer time once every rank arrived; ``full_bytes`` is the unsharded tensor.

    AllReduce ring 2(N-1)a + 2(N-1)/N B/bw, tree 2 ceil(log2 N) a + 2(N-1)/N B/bw;
    AllGather, ReduceScatter and AllToAll (N-1)a + (N-1)/N B/bw (an all-to-all's ``B`` is one
    rank's buffer: (N-1)/N of it leaves the rank, one message per peer); Broadcast
    (N-1)a + B/bw (pipelined); SendRecv (``n`` = 2) a + B/bw.
    The bandwidth is scaled by the protocol's efficiency. Zero at N = 1.
    """
    if n <= 1:
        return 0.0
    lk = link(params, n, coll, spans)
    _, share = protocol(full_bytes)
    bw = lk.bandwidth * share
    if coll == "allreduce":
        hops = 2 * math.ceil(math.log2(n)) if algorithm(coll, full_bytes) == "TREE" else 2 * (n - 1)
        return hops * lk.alpha + 2 * (n - 1) / n * full_bytes / bw
    if coll in ("broadcast", "sendrecv"):
        return (n - 1) * lk.alpha + full_bytes / bw
    return (n - 1) * lk.alpha + (n - 1) / n * full_bytes / bw


def kernel_name(coll: str, nbytes: int, legacy: bool) -> str:
    """A kernel name as NCCL writes it (2.19+ ``ncclDevKernel_``; older ``ncclKernel_``)."""
    if coll in ("alltoall", "sendrecv"):  # NCCL runs both as grouped point-to-point
        stem = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t" if legacy else "ncclDevKernel_SendRecv"
        return f"{stem}(ncclDevComm*, unsigned long, ncclWork*)"
    stem = STEMS[coll]
    algo = algorithm(coll, nbytes)
    proto, _ = protocol(nbytes)
    reduces = coll in ("allreduce", "reduce_scatter")
    if legacy:
        suffix = "_Sum_float" if reduces else "_Sum_int8_t"
        return f"ncclKernel_{stem}_{algo}_{proto}{suffix}(ncclDevComm*, unsigned long, ncclWork*)"
    infix = "_Sum_f32" if reduces else ""
    return f"ncclDevKernel_{stem}{infix}_{algo}_{proto}(ncclDevComm*, unsigned long, ncclWork*)"
