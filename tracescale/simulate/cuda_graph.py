"""The ``cuda_graph`` modifier: forward and backward (with the collectives among them) replayed
from one captured CUDA graph per step, as ``torch.cuda.CUDAGraph.replay()`` runs them.

Why an engine of its own: a graph changes who gates each kernel. The host issues one
``cudaGraphLaunch`` (``graph_launch`` seconds) instead of a launch per op, and returns at
once; the device then runs the captured nodes in order, each ``graph_gap`` after the node it
depends on: the previous node on its stream, or, where the capture recorded a stream wait
(a collective after the gradient it reduces, compute after a collective it needs), the last
node of the other stream. Collectives stay collectives: each starts when the last rank of
the group reached it. Every graph kernel carries the graph launch's correlation id and no
launch of its own, as Kineto writes them; captured stream waits leave no runtime call and no
``cuda_sync`` event. Outside :meth:`GraphEngine.graph_begin` / :meth:`GraphEngine.graph_end`
it is the plain engine.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracescale.simulate import comm_model
from tracescale.simulate.engine import CBID, Engine, Times
from tracescale.simulate.events import COMM_STREAM, COMPUTE_STREAM
from tracescale.simulate.groups import Groups

CBID.setdefault("cudaGraphLaunch", 311)
#: the host op around the graph launch (what ``CUDAGraph.replay`` shows as)
REPLAY_OP = "CUDAGraph::replay"


class GraphEngine(Engine):
    """:class:`Engine` whose program calls between ``graph_begin`` and ``graph_end`` are nodes
    of one CUDA graph launched by a single ``cudaGraphLaunch``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.capturing = False
        self._gate: dict[int, Times] = {}
        self._graph_ext = 0
        self._graph_corr = 0
        self.gap = round(self.p.graph_gap * 1e9)

    def graph_begin(self) -> None:
        """``cudaGraphLaunch`` on the host; the graph's first node on each stream starts when
        the stream is free and the launch returned."""
        c = round(self.p.graph_launch * 1e9)
        h = self.h
        self._graph_ext = self._host_event("cpu_op", REPLAY_OP, h, h + c)
        call_start = h + c // 8
        call_end = h + c - c // 8
        self._graph_corr = self._runtime("cudaGraphLaunch", call_start, call_end, self._graph_ext)
        self._gate = {s: np.maximum(self.free[s], call_end) for s in (COMPUTE_STREAM, COMM_STREAM)}
        self.h = h + c
        self.capturing = True

    def graph_end(self) -> None:
        """A capture must join every forked stream back into the launch stream, so work issued
        on it after the graph waits for every node of the graph."""
        self.capturing = False
        self.free[COMPUTE_STREAM] = np.maximum(self.free[COMPUTE_STREAM], self.free[COMM_STREAM])

    def _node(self, stream: int, dur: Times | int) -> tuple[Times, Times]:
        start: Times = self._gate[stream].copy()
        end: Times = start + dur
        self.free[stream] = end
        self._gate[stream] = end + self.gap
        return start, end

    def _after(self, stream: int, done: Times) -> None:
        """The next node on ``stream`` depends on work that ends at ``done`` (a captured wait)."""
        self._gate[stream] = np.maximum(self._gate[stream], done + self.gap)

    def kernel(
        self,
        ops: tuple[str, ...],
        name: str,
        dur: Times | int,
        stream: int = COMPUTE_STREAM,
        cat: str = "kernel",
        **args: Any,
    ) -> Times:
        if not self.capturing:
            return super().kernel(ops, name, dur, stream, cat, **args)
        start, end = self._node(stream, dur)
        self._gpu_event(cat, name, stream, start, end, self._graph_ext, self._graph_corr, **args)
        self._gpu_busy(cat, start, end)
        return end

    def wait_for(
        self, stream: int, on_stream: int, op: str, token: tuple[Times, int] | None = None
    ) -> None:
        if not self.capturing:
            super().wait_for(stream, on_stream, op, token)
            return
        self._after(stream, token[0] if token is not None else self.free[on_stream])

    def collective(
        self,
        coll: str,
        in_nelems: int,
        out_nelems: int,
        full_bytes: int,
        after: int | None = None,
        record: bool = False,
        group: Groups | None = None,
    ) -> tuple[Times, int]:
        if not self.capturing:
            return super().collective(coll, in_nelems, out_nelems, full_bytes, after, record,
                                      group)  # fmt: skip
        assert group is None, "graph capture runs collectives over the world only"
        p, n = self.p, self.n
        self.seq += 1
        if after is not None:
            self._after(COMM_STREAM, self.free[after])
        ready = self._gate[COMM_STREAM].copy()
        xfer = ready.max(axis=1, keepdims=True)
        late = ready.argmax(axis=1)
        seconds = (
            0.0 if self.free_transfers else comm_model.transfer_seconds(p, n, coll, full_bytes)
        )
        dur = np.rint(seconds * 1e9 * self.shared_jitter()).astype(np.int64)
        end = np.broadcast_to(xfer + dur, ready.shape).copy()
        self.free[COMM_STREAM] = end
        self._gate[COMM_STREAM] = end + self.gap
        names = {"allgather": "_allgather_base", "reduce_scatter": "_reduce_scatter_base"}
        args: dict[str, Any] = {
            "Collective name": names.get(coll, coll),
            "In msg nelems": in_nelems,
            "Out msg nelems": out_nelems,
            "Group size": n,
            "dtype": "Float",
            "Process Group Name": "0",
            "Process Group Description": "default_pg",
            "Process Group Ranks": str(list(range(n))),
            "Seq": self.seq,
        }
        name = comm_model.kernel_name(coll, full_bytes, self.legacy_nccl)
        self._gpu_event("kernel", name, COMM_STREAM, ready, end, self._graph_ext,
                        self._graph_corr, grid=[8, 1, 1], block=[544, 1, 1], **args)  # fmt: skip
        self.record_comm(ready, np.broadcast_to(xfer, ready.shape), end,
                         np.broadcast_to(late[:, None], ready.shape))  # fmt: skip
        return end, -1


def engine_class(graphed: bool) -> type[Engine]:
    """The engine a pattern runs on: :class:`GraphEngine` under ``cuda_graph``."""
    return GraphEngine if graphed else Engine


def begin(e: Engine) -> None:
    """Start the step's graph (a no-op on the plain engine)."""
    if isinstance(e, GraphEngine):
        e.graph_begin()


def end(e: Engine) -> None:
    """End the step's graph: what the host issues next is launched op by op again."""
    if isinstance(e, GraphEngine):
        e.graph_end()
