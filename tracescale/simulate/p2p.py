"""Point-to-point send and receive between pipeline stages, on the event-level engine.

Why apart from collectives: a pipeline's activations and gradients go from one rank to one
peer, and the two sides do not meet. PyTorch issues ``isend``/``irecv`` as ``nccl:send`` /
``nccl:recv`` around ``record_param_comms`` (``Collective name`` ``send`` / ``recv``, the
pair's process group of two ranks), and NCCL runs each as a ``SendRecv`` kernel. The model
here, stated rather than measured:

- a send is eager: its stream first waits for the compute that produced the tensor, then the
  kernel moves the bytes (``alpha + bytes / bandwidth`` of the pair's link, intra- or
  inter-node) and ends, whether the receiver has posted its recv or not;
- a recv kernel starts when launched (the host launches ahead) and ends when the data arrived
  (the sender's kernel start plus the transfer), so it holds the wait for the neighbouring
  stage; the compute stream then waits for it (``cudaStreamWaitEvent``).

The wait inside a recv stays ``communication`` in the truth, with no cross-rank cause: that is
the pipeline bubble, and the analyzer's rule for point-to-point time too (a stage's k-th recv
is no collective instance whose last arrival could be named).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracescale.simulate import comm_model, groups
from tracescale.simulate.engine import EVENT_CALL_NS, Engine, Times
from tracescale.simulate.events import COMPUTE_STREAM, RECV_STREAM, SEND_STREAM
from tracescale.simulate.groups import Groups

#: a recv whose data is already there still runs this long
RECV_MIN_NS = 2_000


def pair_groups(stages: int, dp: int, virtual: int) -> dict[tuple[int, int], Groups]:
    """(stage, next stage) -> the groups of two ranks, one per replica (rank = stage*dp + d).

    Interleaved 1F1B also sends from the last stage to the first (the ring's closing pair)."""
    pairs = [(s, s + 1) for s in range(stages - 1)]
    if virtual > 1 and stages > 2:
        pairs.append((0, stages - 1))
    out = {}
    for lo, hi in pairs:
        members = tuple((lo * dp + d, hi * dp + d) for d in range(dp))
        names = tuple(f"pp_{lo}_{hi}_dp{d}" for d in range(dp))
        out[(lo, hi)] = Groups("pipeline_pair", members, names)
    return out


def _args(kind: str, nbytes: int) -> dict[str, Any]:
    nel = nbytes // 4
    return {"Collective name": kind, "In msg nelems": nel, "Out msg nelems": nel,
            "Group size": 2, "dtype": "Float", "In split size": "[]",
            "Out split size": "[]"}  # fmt: skip


def _seconds(e: Engine, me: np.ndarray, peer: np.ndarray, nbytes: int) -> np.ndarray:
    """Per rank: the transfer time of its pair's link (inter-node where the pair spans)."""
    gpn = e.p.gpus_per_node
    intra = comm_model.transfer_seconds(e.p, 2, "sendrecv", nbytes, False)
    inter = comm_model.transfer_seconds(e.p, 2, "sendrecv", nbytes, True)
    return np.where(me // gpn == peer // gpn, intra, inter)


def transfer(
    e: Engine,
    kind: str,
    mask: np.ndarray,
    peer: np.ndarray,
    group: Groups,
    nbytes: int,
    sent: Times | None = None,
) -> Times:
    """One send (``kind`` "send") or recv on the ranks of ``mask`` with their ``peer`` ranks.

    Call inside ``e.only(mask)``. A send returns its kernel's end per rank (when its bytes
    arrived at the peer); a recv needs ``sent``, those ends indexed by the sender's rank.
    """
    stream = SEND_STREAM if kind == "send" else RECV_STREAM
    c, h = e.launch, e.h
    mark = len(e.events)
    args = _args(kind, nbytes)
    head = 2 * EVENT_CALL_NS if kind == "send" else 0
    total = c + head
    e._host_event("user_annotation", f"nccl:{kind}", h, h + total)
    ext = e._host_event("cpu_op", "record_param_comms", h + c // 16, h + total - c // 16, **args)
    if kind == "send":  # the activation must be computed before it leaves
        e.h = h + c // 16
        e.stream_wait(stream, e.event_record(COMPUTE_STREAM, ext), COMPUTE_STREAM, ext)
    launch_end = h + head + (c - c // 4)
    corr = e._runtime("cudaLaunchKernel", launch_end - c // 3, launch_end, ext)
    start = np.maximum(e.free[stream], launch_end)
    ranks = np.arange(e.n)
    ideal = np.rint(_seconds(e, ranks, peer, nbytes) * 1e9).astype(np.int64)
    if kind == "send":
        end = start + np.rint(ideal * e.jitter()).astype(np.int64)
        xfer = start
    else:
        assert sent is not None, "a recv needs its peers' send ends"
        arrival = sent[:, peer]
        end = np.maximum(start + RECV_MIN_NS, arrival)
        xfer = np.clip(arrival - ideal, start, end)
    e.free[stream] = end
    e._gpu_event("kernel", comm_model.kernel_name("sendrecv", nbytes, e.legacy_nccl), stream,
                 start, end, ext, corr, grid=[1, 1, 1], block=[640, 1, 1], **args)  # fmt: skip
    e.record_comm(start, xfer, end, np.broadcast_to(ranks, start.shape))  # no cross-rank cause
    e.h = h + total
    groups.register(e, group)
    index = group.index(e.n)
    per_rank = tuple(
        {"Process Group Name": group.names[int(index[r])] if index[r] >= 0 else "",
         "Process Group Description": group.desc,
         "Process Group Ranks": str(sorted((r, int(peer[r]))))}
        for r in range(e.n)
    )  # fmt: skip
    groups.stamp(e, mark, per_rank)
    out: Times = end
    return out
