"""Event-level SPMD scheduler of the pattern simulator: program calls in, per-rank timelines out.

Every rank runs the same program (SPMD), so each program call advances *all* ranks at once:
times are ``(replicas, ranks)`` integer-ns arrays. A replica is an independent copy of the job
(its own random draws); the truth at large N averages many replicas in one vectorized pass
instead of simulating thousands of steps. The host thread, the compute stream and the NCCL
stream each have a cursor; a kernel starts when its stream is free and its launch returned; a
stream wait holds a stream until the recorded event's work ended; a collective's transfer
starts when the last rank of the group reached it (the late rank is remembered for
attribution). With ``record=True`` (one replica) every call also keeps a trace-event template
and the intervals the truth's attribution needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracescale.simulate import comm_model, groups
from tracescale.simulate.events import COMM_STREAM, COMPUTE_STREAM, RECV_STREAM, SEND_STREAM
from tracescale.simulate.groups import Groups
from tracescale.simulate.params import SimParams
from tracescale.simulate.schedule import D2H_NS, ITEM_TAIL_NS, SYNC_RETURN_NS, StepRecord

Times = np.ndarray  # int64, shape (replicas, ranks)
EVENT_CALL_NS = 2_000  # host cost of cudaEventRecord / cudaStreamWaitEvent
WRAP_NS = 500  # host time of the op around a stream wait, before and after the runtime calls
CBID = {
    "cudaLaunchKernel": 211,
    "cudaMemcpyAsync": 41,
    "cudaStreamSynchronize": 131,
    "cudaEventRecord": 135,
    "cudaStreamWaitEvent": 147,
}


@dataclass(frozen=True)
class Template:
    """One trace event for every rank: times per rank, everything else shared."""

    cat: str
    name: str
    gpu: bool
    stream: int
    start: np.ndarray  # (ranks,) ns
    end: np.ndarray
    args: dict[str, Any]
    #: ranks the event belongs to (None: every rank; a pipeline stage runs its own program)
    ranks: np.ndarray | None = None
    #: per-rank args on top of ``args`` (a process group's name and members differ by rank)
    per_rank: tuple[dict[str, Any], ...] | None = None


@dataclass
class StepIntervals:
    """One step's intervals for all ranks, kept for the attribution (recording only)."""

    start: np.ndarray
    compute: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    memcpy: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    #: per rank: kernel start, transfer start, end, late rank (-1: the rank did not take part)
    comm: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    labels: list[tuple[np.ndarray, np.ndarray, str]] = field(default_factory=list)
    first_gpu: np.ndarray | None = None
    sync_return: np.ndarray | None = None


class Engine:
    """Cursors of all ranks (and replicas) plus the optional event recording."""

    def __init__(
        self,
        params: SimParams,
        n: int,
        div: float,
        replicas: int,
        rng: np.random.Generator,
        record: bool,
        legacy_nccl: bool = False,
    ) -> None:
        self.p, self.n, self.div, self.rng = params, n, div, rng
        self.record = record and replicas == 1
        self.legacy_nccl = legacy_nccl
        #: transfers take no time (the step at infinite N, where only their launches remain)
        self.free_transfers = False
        shape = (replicas, n)
        self.h = np.zeros(shape, np.int64)
        streams = (COMPUTE_STREAM, COMM_STREAM, RECV_STREAM, SEND_STREAM)
        self.free = {s: np.zeros(shape, np.int64) for s in streams}
        #: process groups other than the world, in first-use order (the ranks' pg_config)
        self.groups: list[Groups] = []
        self.group_seq: dict[Groups, int] = {}
        #: named GPU-time counters per rank over the whole run (ns): e.g. recomputed forward
        self.tallies: dict[str, np.ndarray] = {}
        self.launch = round(params.launch_overhead * 1e9)
        self.events: list[Template] = []
        self.records: dict[int, list[StepRecord]] = {r: [] for r in range(n)} if record else {}
        self.durations: list[np.ndarray] = []  # per step: (replicas, ranks) ns
        self.seq = 0
        self._ext = 1
        self._corr = 100_000
        self._step: StepIntervals | None = None

    # ---------------------------------------------------------------- random draws
    def jitter(self) -> np.ndarray:
        """Per-rank multiplicative noise (replicas, ranks); ones when jitter is off."""
        if self.p.jitter == 0:
            return np.ones(self.h.shape)
        z = self.rng.standard_normal(self.h.shape)
        return 1 + self.p.jitter * np.clip(z, -3, 3)

    def shared_jitter(self) -> np.ndarray:
        """One factor per replica (a transfer is one event for the whole group)."""
        if self.p.jitter == 0:
            return np.ones((self.h.shape[0], 1))
        z = self.rng.standard_normal((self.h.shape[0], 1))
        return 1 + self.p.jitter * np.clip(z, -3, 3)

    def parallel(self, seconds: float) -> float:
        """Work that the job divides over the ranks (strong scaling) or keeps (weak)."""
        return seconds / self.div

    # ---------------------------------------------------------------- low-level emission
    def _ext_id(self) -> int:
        self._ext += 1
        return self._ext

    def _corr_id(self) -> int:
        self._corr += 1
        return self._corr

    def _host_event(self, cat: str, name: str, a: Times, b: Times, **args: Any) -> int:
        if not self.record:
            return 0
        ext = self._ext_id()
        full = {"External id": ext, "Record function id": ext, **args}
        self.events.append(Template(cat, name, False, 0, a[0].copy(), b[0].copy(), full))
        return ext

    def _runtime(self, name: str, a: Times, b: Times, ext: int) -> int:
        if not self.record:
            return 0
        corr = self._corr_id()
        args = {"External id": ext, "cbid": CBID.get(name, 0), "correlation": corr}
        self.events.append(Template("cuda_runtime", name, False, 0, a[0].copy(), b[0].copy(), args))
        return corr

    def _gpu_event(
        self, cat: str, name: str, stream: int, a: Times, b: Times, ext: int, corr: int, **args: Any
    ) -> None:
        if self.record:
            full = {"External id": ext, "queued": 0, "context": 1, "stream": stream,
                    "correlation": corr, **args}  # fmt: skip
            self.events.append(Template(cat, name, True, stream, a[0].copy(), b[0].copy(), full))

    def _gpu_busy(self, kind: str, a: Times, b: Times) -> None:
        st = self._step
        if st is None:
            return
        if st.first_gpu is None:
            st.first_gpu = np.full(a.shape, -1, np.int64)
        st.first_gpu = np.where(st.first_gpu < 0, a, st.first_gpu)
        if self.record:
            (st.compute if kind == "kernel" else st.memcpy).append((a[0].copy(), b[0].copy()))

    # ---------------------------------------------------------------- program calls
    def host(
        self, cat: str, name: str, dur: Times, label: str = "", ops: tuple[str, ...] = ()
    ) -> None:
        """Host work of ``dur`` ns on the main thread (an annotation with cpu_ops inside)."""
        a = self.h
        b = a + dur
        self._host_event(cat, name, a, b)
        for i, op in enumerate(ops):
            lo = a + (b - a) * i // len(ops)
            hi = a + (b - a) * (i + 1) // len(ops)
            self._host_event("cpu_op", op, lo, hi)
        if label and self._step is not None and self.record:
            self._step.labels.append((a[0].copy(), b[0].copy(), label))
        self.h = b

    def annotate(self, cat: str, name: str, a: Times) -> None:
        """An annotation from ``a`` to the host cursor (emitted after its contents)."""
        self._host_event(cat, name, a, self.h)

    def _launch_host(self, ops: tuple[str, ...], runtime: str) -> tuple[int, int, Times]:
        c, h = self.launch, self.h
        ext = 0
        for depth, name in enumerate(ops):
            ext = self._host_event("cpu_op", name, h + depth * (c // 16), h + c - depth * (c // 16))
        launch_end = h + (c - c // 4)
        corr = self._runtime(runtime, launch_end - c // 3, launch_end, ext)
        self.h = h + c
        return ext, corr, launch_end

    def kernel(
        self,
        ops: tuple[str, ...],
        name: str,
        dur: Times | int,
        stream: int = COMPUTE_STREAM,
        cat: str = "kernel",
        **args: Any,
    ) -> Times:
        """Launch one kernel (or memcpy) from the host; returns its end on the GPU."""
        runtime = "cudaMemcpyAsync" if cat == "gpu_memcpy" else "cudaLaunchKernel"
        ext, corr, launch_end = self._launch_host(ops, runtime)
        start: Times = np.maximum(self.free[stream], launch_end)
        end: Times = start + dur
        self.free[stream] = end
        self._gpu_event(cat, name, stream, start, end, ext, corr, **args)
        self._gpu_busy(cat, start, end)
        return end

    def event_record(self, stream: int, ext: int = 0) -> tuple[Times, int]:
        """cudaEventRecord on ``stream``: the event completes when its queued work ends."""
        a = self.h
        corr = self._runtime("cudaEventRecord", a, a + EVENT_CALL_NS, ext)
        self.h = a + EVENT_CALL_NS
        return self.free[stream].copy(), corr

    def stream_wait(
        self, stream: int, token: tuple[Times, int], on_stream: int, ext: int = 0
    ) -> None:
        """cudaStreamWaitEvent: ``stream`` runs nothing new before the event completed.

        Written like Kineto with cuda sync events on: the runtime call on the host and a
        ``Stream Wait Event`` on the waiting stream naming the producer stream and the
        correlation id of the ``cudaEventRecord`` call.
        """
        done, record_corr = token
        a = self.h
        call_end = a + EVENT_CALL_NS
        corr = self._runtime("cudaStreamWaitEvent", a, call_end, ext)
        self.h = call_end
        start = np.maximum(self.free[stream], call_end)
        end = np.maximum(start, done)
        self.free[stream] = end
        self._gpu_event("cuda_sync", "Stream Wait Event", stream, start, end, ext, corr,
                        cuda_sync_kind="Stream Wait Event", wait_on_stream=on_stream,
                        wait_on_cuda_event_record_corr_id=record_corr,
                        wait_on_cuda_event_id=record_corr % 4096)  # fmt: skip

    def wait_for(
        self, stream: int, on_stream: int, op: str, token: tuple[Times, int] | None = None
    ) -> None:
        """In cpu_op ``op``, ``stream`` waits for ``token`` (or all queued on ``on_stream``)."""
        a = self.h
        calls = 1 if token is not None else 2
        ext = self._host_event("cpu_op", op, a, a + calls * EVENT_CALL_NS + 2 * WRAP_NS)
        self.h = a + WRAP_NS
        self.stream_wait(stream, token or self.event_record(on_stream, ext), on_stream, ext)
        self.h += WRAP_NS

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
        """One NCCL collective over the world (or each of ``group``'s groups) on the NCCL stream.

        As ProcessGroupNCCL does, inside ``record_param_comms``: with ``after`` the NCCL
        stream first waits for the work queued on that stream (record + wait); with
        ``record`` an event is recorded after the kernel (for a later wait on it). Returns
        the kernel's end per rank and that event (end, -1 without ``record``).
        """
        p, n, c, h = self.p, self.n, self.launch, self.h
        mark = len(self.events)
        self.seq += 1
        names = {"allgather": "_allgather_base", "reduce_scatter": "_reduce_scatter_base",
                 "alltoall": "all_to_all"}  # fmt: skip
        args: dict[str, Any] = {
            "Collective name": names.get(coll, coll),
            "In msg nelems": in_nelems,
            "Out msg nelems": out_nelems,
            "Group size": n,
            "dtype": "Float",
            "In split size": "[]",
            "Out split size": "[]",
            "Process Group Name": "0",
            "Process Group Description": "default_pg",
            "Process Group Ranks": str(list(range(n))),
            "Seq": self.seq,
        }
        head = 2 * EVENT_CALL_NS if after is not None else 0
        tail = EVENT_CALL_NS if record else 0
        total = c + head + tail
        self._host_event("user_annotation", comm_model.ANNOTATIONS[coll], h, h + total)
        ext = self._host_event(
            "cpu_op", "record_param_comms", h + c // 16, h + total - c // 16, **args
        )
        if after is not None:
            self.h = h + c // 16
            self.stream_wait(COMM_STREAM, self.event_record(after, ext), after, ext)
        launch_end = h + head + (c - c // 4)
        corr = self._runtime("cudaLaunchKernel", launch_end - c // 3, launch_end, ext)
        ready = np.maximum(self.free[COMM_STREAM], launch_end)
        if group is None:
            xfer = np.broadcast_to(ready.max(axis=1, keepdims=True), ready.shape)
            late = np.broadcast_to(ready.argmax(axis=1)[:, None], ready.shape)
            seconds = (
                0.0 if self.free_transfers else comm_model.transfer_seconds(p, n, coll, full_bytes)
            )
            dur = np.rint(seconds * 1e9 * self.shared_jitter()).astype(np.int64)
            end = (xfer + dur).copy()
        else:
            xfer, late, end = groups.meet(self, group, ready, coll, full_bytes)
        self.free[COMM_STREAM] = end
        name = comm_model.kernel_name(coll, full_bytes, self.legacy_nccl)
        self._gpu_event("kernel", name, COMM_STREAM, ready, end, ext, corr,
                        grid=[8, 1, 1], block=[544, 1, 1], **args)  # fmt: skip
        self.record_comm(ready, xfer, end, late)
        event_corr = -1
        if record:
            self.h = launch_end + c // 8
            _, event_corr = self.event_record(COMM_STREAM, ext)
        self.h = h + total
        if group is not None:
            groups.register(self, group)
            self.group_seq[group] = self.group_seq.get(group, 0) + 1
            groups.stamp(self, mark, group.args(n, self.group_seq[group]))
        return end, event_corr

    def item_sync(self) -> None:
        """loss.item(): D2H copy, cudaStreamSynchronize until the compute stream drains."""
        c, h = self.launch, self.h
        launch_end = h + c // 8 + c // 3
        d2h = np.maximum(self.free[COMPUTE_STREAM], launch_end)
        drain = d2h + D2H_NS
        sync_start = launch_end + c // 8
        ret = np.maximum(drain, sync_start) + SYNC_RETURN_NS
        item_end = ret + ITEM_TAIL_NS
        self._host_event("cpu_op", "aten::item", h, item_end)
        ext = self._host_event("cpu_op", "aten::_local_scalar_dense", h + c // 16,
                               item_end - ITEM_TAIL_NS // 2)  # fmt: skip
        corr = self._runtime("cudaMemcpyAsync", launch_end - c // 3, launch_end, ext)
        self._gpu_event("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", COMPUTE_STREAM, d2h,
                        drain, ext, corr, bytes=4)  # fmt: skip
        self._runtime("cudaStreamSynchronize", sync_start, ret, ext)
        self._gpu_busy("gpu_memcpy", d2h, drain)
        st = self._step
        if st is not None:
            if self.record:
                st.labels.append((h[0].copy(), item_end[0].copy(), "sync_call"))
            st.sync_return = item_end.copy()
        self.free[COMPUTE_STREAM] = drain
        self.h = item_end

    def tally(self, name: str, dur: Times | int, mask: np.ndarray | None = None) -> None:
        """Add ``dur`` to counter ``name`` of every rank (of ``mask`` only, when given)."""
        add = np.broadcast_to(np.asarray(dur, np.int64), self.h.shape)
        if mask is not None:
            add = np.where(mask[None, :], add, 0)
        self.tallies[name] = self.tallies.get(name, np.zeros(self.h.shape, np.int64)) + add

    def record_comm(self, ready: Times, xfer: Times, end: Times, late: Times) -> None:
        """Keep one communication kernel per rank for the attribution (recording only)."""
        if self.record and self._step is not None:
            row = (np.asarray(x[0]).copy() for x in (xfer, end, late))
            self._step.comm.append((ready[0].copy(), *row))

    # ---------------------------------------------------------------- steps
    def begin_step(self) -> None:
        self._step = StepIntervals(start=self.h.copy())

    def end_step(self, number: int) -> None:
        """Close ProfilerStep#number on every rank; keep durations and attribution input."""
        st = self._step
        assert st is not None, "end_step without begin_step"
        self._host_event("user_annotation", f"ProfilerStep#{number}", st.start, self.h)
        self.durations.append(self.h - st.start)
        if self.record:
            for r in range(self.n):
                self.records[r].append(_rank_record(st, r, number, int(self.h[0, r])))
        self._step = None


def _rank_record(st: StepIntervals, r: int, number: int, end: int) -> StepRecord:
    """One rank's :class:`StepRecord` (the attribution's input) from the step's intervals."""
    rec = StepRecord(rank=r, step=number, start=int(st.start[0, r]), end=end)
    for a, b in st.compute:
        if b[r] > a[r]:
            rec.add_compute(int(a[r]), int(b[r]))
    rec.memcpy = [(int(a[r]), int(b[r])) for a, b in st.memcpy if b[r] > a[r]]
    rec.comm = [(int(a[r]), int(x[r]), int(e[r]), int(late[r])) for a, x, e, late in st.comm
                if late[r] >= 0]  # fmt: skip
    rec.labels = [(int(a[r]), int(b[r]), lab, -1, -1) for a, b, lab in st.labels if b[r] > a[r]]
    first = int(st.first_gpu[0, r]) if st.first_gpu is not None else -1
    rec.first_gpu = first if first >= 0 else end
    rec.sync_return = int(st.sync_return[0, r]) if st.sync_return is not None else -1
    return rec
