"""The exact per-rank, per-step timeline of the simulated data-parallel step (integer ns).

One :class:`RankStep` lays out one rank's step in three phases because ranks meet twice:
``front()`` runs dataloader .. backward and returns when each gradient bucket is ready;
the run combines all ranks into the shared AllReduce times; ``back()`` runs the collectives,
optimizer, ``loss.item()`` and the rank-0 reduction and returns the barrier arrival; the run
takes the last arrival; ``finish()`` closes the barrier and the ProfilerStep. The same code
emits the trace events (second pass, one rank at a time) and records the intervals the truth
is computed from (first pass), so the traces and the truth cannot disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tracescale.simulate import kernels as K
from tracescale.simulate.events import COMM_STREAM, COMPUTE_STREAM, Emitter, host_ops, nest_launch
from tracescale.simulate.params import SimParams

T0_NS = 1_000_000_000  # ts of the first step: 1e6 µs after the profiler's clock origin
D2H_NS = 1_800  # loss.item()'s 4-byte device-to-host copy
SYNC_RETURN_NS = 3_000  # cudaStreamSynchronize returns this long after the GPU drains
ITEM_TAIL_NS = 1_000  # aten::item returns this long after the sync call
COMPONENTS = ("dl", "h2d", "fwd", "bwd", "opt", "stall", "reduce", "host")


def ns(seconds: float) -> int:
    return round(seconds * 1e9)


@dataclass(frozen=True)
class Plan:
    """What every rank of one run shares: scaled sizes, bucket layout, launch constants."""

    params: SimParams
    n: int
    mode: str
    launch: int  # host ns per launched op
    fwd_cum: list[float]
    bwd_cum: list[float]
    bucket_after: list[int]  # bucket b is ready after this many backward kernels
    bucket_nelems: list[int]
    straggler: int  # -1 when none at this N

    def scaled(self, seconds: float) -> float:
        """Data-parallel part: divided by N in strong mode, constant per rank in weak mode."""
        return seconds / self.n if self.mode == "strong" else seconds

    @property
    def launch_end(self) -> int:
        return self.launch - self.launch // 4

    def transfer_ns(self, bucket: int, factor: float) -> int:
        """Ring AllReduce time of one bucket: 2(N-1)alpha + 2(N-1)/N * bytes / bandwidth."""
        p, n = self.params, self.n
        nbytes = 4 * self.bucket_nelems[bucket]
        return ns((2 * (n - 1) * p.alpha + 2 * (n - 1) / n * nbytes / p.bandwidth) * factor)


def make_plan(params: SimParams, n: int, mode: str) -> Plan:
    """Derive the run-wide constants for ``n`` ranks."""
    nb = params.buckets
    kb = 4 * params.layers
    after = []
    for b in range(nb):
        frac = params.comm_start + (1 - params.comm_start) * b / max(nb - 1, 1)
        after.append(min(kb, max(1, math.ceil(frac * kb - 1e-9))))
    total = int(params.model_bytes) // 4
    nelems = [total // nb + (1 if b < total % nb else 0) for b in range(nb)]
    return Plan(
        params=params,
        n=n,
        mode=mode,
        launch=ns(params.launch_overhead),
        fwd_cum=K.cumulative(K.FWD_LAYER, params.layers),
        bwd_cum=K.cumulative(K.BWD_LAYER, params.layers),
        bucket_after=after if n > 1 else [],
        bucket_nelems=nelems,
        straggler=params.straggler_rank if 0 <= params.straggler_rank < n else -1,
    )


def rank_factors(params: SimParams, n: int, seed: int, rank: int, steps: int) -> np.ndarray:
    """Multiplicative jitter per (step, component) of one rank; independent of other ranks."""
    if params.jitter == 0:
        return np.ones((steps, len(COMPONENTS)))
    z = np.random.default_rng([seed, n, rank, 1]).standard_normal((steps, len(COMPONENTS)))
    return 1 + params.jitter * np.clip(z, -3, 3)


def comm_factors(params: SimParams, n: int, seed: int, steps: int) -> np.ndarray:
    """Jitter of each collective instance (one value for all ranks: it is one transfer)."""
    if params.jitter == 0:
        return np.ones((steps, params.buckets))
    z = np.random.default_rng([seed, n, 2]).standard_normal((steps, params.buckets))
    return 1 + params.jitter * np.clip(z, -3, 3)


@dataclass(frozen=True)
class CommShared:
    """AllReduce instance times common to all ranks of a step (transfer start, end, late rank)."""

    start: list[int]
    end: list[int]
    late: list[int]


@dataclass
class StepRecord:
    """The intervals of one rank-step the truth is computed from (all ns, sorted)."""

    rank: int
    step: int
    start: int
    end: int = 0
    compute: list[list[int]] = field(default_factory=list)  # merged busy intervals
    memcpy: list[tuple[int, int]] = field(default_factory=list)
    comm: list[tuple[int, int, int, int]] = field(default_factory=list)  # start, xfer, end, late
    labels: list[tuple[int, int, str, int, int]] = field(default_factory=list)  # +late, wait_end
    first_gpu: int = -1
    sync_return: int = -1

    def add_compute(self, a: int, b: int) -> None:
        if self.first_gpu < 0:
            self.first_gpu = a
        if self.compute and a <= self.compute[-1][1]:
            self.compute[-1][1] = max(self.compute[-1][1], b)
        else:
            self.compute.append([a, b])


def _nccl_args(plan: Plan, name: str, nelems: int, seq: int) -> dict[str, object]:
    n = plan.n
    return {
        "Collective name": name,
        "In msg nelems": nelems,
        "Out msg nelems": nelems,
        "Group size": n,
        "dtype": "Float",
        "In split size": "[]",
        "Out split size": "[]",
        "Process Group Name": "0",
        "Process Group Description": "default_pg",
        "Process Group Ranks": str(list(range(n))),
        "Seq": seq,
    }


class RankStep:
    """One rank's step, laid out phase by phase (see the module docstring)."""

    def __init__(
        self,
        plan: Plan,
        rank: int,
        index: int,
        start: int,
        factors: np.ndarray,
        em: Emitter,
    ) -> None:
        self.plan, self.rank, self.index, self.em = plan, rank, index, em
        self.f = {c: float(factors[i]) for i, c in enumerate(COMPONENTS)}
        self.rec = StepRecord(rank=rank, step=plan.params.first_step + index, start=start)
        self.h = start  # host (main thread) cursor
        self.free = start  # compute stream free from
        self.ready: list[int] = []
        self.bucket_ids: list[tuple[int, int]] = []
        self.arrival = 0

    def _launch(self, ops: tuple[str, ...], name: str, dur: int, cat: str = "kernel") -> int:
        """Launch one op on the compute stream; returns the GPU start."""
        em, c = self.em, self.plan.launch
        ext, corr, launch_end = nest_launch(em, ops, "cudaLaunchKernel", self.h, c)
        start = max(self.free, launch_end)
        grid = K.GRID.get(name, [256, 1, 1])
        em.gpu(
            cat, name, COMPUTE_STREAM, start, start + dur, ext, corr, grid=grid, block=[256, 1, 1]
        )
        self.rec.add_compute(start, start + dur)
        self.free = start + dur
        self.h += c
        return start

    def front(self) -> list[int]:
        """Dataloader .. backward; returns when each bucket may start on this rank's GPU."""
        p, plan, em, rec, c = self.plan.params, self.plan, self.em, self.rec, self.plan.launch
        dl = ns((p.dl_serial + plan.scaled(p.dl_parallel)) * self.f["dl"])
        em.op("user_annotation", K.DATALOADER, self.h, self.h + dl)
        host_ops(em, ("aten::empty", "aten::stack"), self.h + dl // 2, self.h + dl)
        rec.labels.append((self.h, self.h + dl, "dataloader", -1, -1))
        self.h += dl
        nzg = p.zero_grad_kernels
        if nzg:
            em.op("user_annotation", "Optimizer.zero_grad#SGD.zero_grad", self.h, self.h + nzg * c)
        for _ in range(nzg):
            self._launch(("aten::zero_", "aten::fill_"), K.FILL, ns(p.fill_kernel_time))
        work = ns(p.host_work * self.f["host"])
        host_ops(
            em, ("aten::select", "aten::slice", "aten::unbind", "aten::view"), self.h, self.h + work
        )
        self.h += work
        ext, corr, launch_end = nest_launch(
            em, ("aten::to", "aten::_to_copy", "aten::copy_"), "cudaMemcpyAsync", self.h, c
        )
        h2d = ns(plan.scaled(p.h2d_time) * self.f["h2d"])
        nbytes = p.h2d_bytes // plan.n if plan.mode == "strong" else p.h2d_bytes
        ms = max(self.free, launch_end)
        bw = round(nbytes / max(h2d, 1), 6)
        em.gpu("gpu_memcpy", K.H2D, COMPUTE_STREAM, ms, ms + h2d, ext, corr, bytes=nbytes,
               **{"memory bandwidth (GB/s)": bw})  # fmt: skip
        rec.memcpy.append((ms, ms + h2d))
        if rec.first_gpu < 0:
            rec.first_gpu = ms
        self.free = ms + h2d
        self.h += c
        slow = p.straggler_factor if self.rank == plan.straggler else 1.0
        self._phase(
            "fwd", K.FWD_LAYER, plan.fwd_cum, p.fwd_time * slow, "DistributedDataParallel.forward"
        )
        self._phase("bwd", K.BWD_LAYER, plan.bwd_cum, p.bwd_time * slow, None)
        return self.ready

    def _phase(
        self, comp: str, layer: tuple[K.KernelSpec, ...], cum: list[float], base: float,
        annotation: str | None,
    ) -> None:  # fmt: skip
        plan, em, c = self.plan, self.em, self.plan.launch
        total = ns(plan.scaled(base) * self.f[comp])
        count = len(cum) - 1
        if annotation:
            em.op("user_annotation", annotation, self.h, self.h + count * c)
        buckets = list(enumerate(plan.bucket_after)) if comp == "bwd" else []
        for j in range(count):
            ops, name, _ = layer[j % len(layer)]
            dur = round(total * cum[j + 1]) - round(total * cum[j])
            self._launch(ops, name, dur)
            while buckets and buckets[0][1] == j + 1:
                self._bucket(buckets.pop(0)[0])

    def _bucket(self, b: int) -> None:
        """DDP's autograd hook: launch bucket b's AllReduce on the communication stream."""
        plan, em, c, h = self.plan, self.em, self.plan.launch, self.h
        seq = self.index * (plan.params.buckets + 1) + b
        args = _nccl_args(plan, "allreduce", plan.bucket_nelems[b], seq)
        em.op("user_annotation", "nccl:all_reduce", h, h + c)
        ext = em.op("cpu_op", "record_param_comms", h + c // 16, h + c - c // 16, **args)
        launch_end = h + plan.launch_end
        corr = em.runtime("cudaLaunchKernel", launch_end - c // 3, launch_end, ext)
        self.bucket_ids.append((ext, corr))
        self.ready.append(max(self.free, launch_end))
        self.h += c

    def back(self, comm: CommShared) -> int:
        """Collectives, optimizer, loss.item(), sync stall, reduction; returns barrier arrival."""
        p, plan, em, rec, c = self.plan.params, self.plan, self.em, self.rec, self.plan.launch
        prev = -1
        for b, ready in enumerate(self.ready):
            start = max(ready, prev)
            ext, corr = self.bucket_ids[b]
            seq = self.index * (p.buckets + 1) + b
            args = _nccl_args(plan, "allreduce", plan.bucket_nelems[b], seq)
            em.gpu("kernel", K.ALLREDUCE, COMM_STREAM, start, comm.end[b], ext, corr,
                   grid=[8, 1, 1], block=[544, 1, 1], **args)  # fmt: skip
            rec.comm.append((start, comm.start[b], comm.end[b], comm.late[b]))
            prev = comm.end[b]
        if plan.n > 1:
            ops = ("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",)
            ext, corr, _ = nest_launch(em, ops, "cudaStreamWaitEvent", self.h, c)
            if prev > self.free:
                em.gpu("cuda_sync", "Stream Wait Event", COMPUTE_STREAM, self.free, prev, ext,
                       corr, wait_on_stream=COMM_STREAM)  # fmt: skip
            self.free = max(self.free, prev)
            self.h += c
        k = p.opt_kernels
        em.op("user_annotation", "Optimizer.step#SGD.step", self.h, self.h + k * c)
        total = ns(p.opt_time * self.f["opt"])
        for i in range(k):
            self._launch(("aten::_foreach_add_",), K.OPT, total * (i + 1) // k - total * i // k)
        # loss.item(): D2H copy, then block until the GPU drains.
        h = self.h
        launch_end = h + c // 8 + c // 3
        d2h_start = max(self.free, launch_end)
        drain = d2h_start + D2H_NS
        sync_start = launch_end + c // 8
        ret = max(drain, sync_start) + SYNC_RETURN_NS
        item_end = ret + ITEM_TAIL_NS
        em.op("cpu_op", "aten::item", h, item_end)
        ext = em.op(
            "cpu_op", "aten::_local_scalar_dense", h + c // 16, item_end - ITEM_TAIL_NS // 2
        )
        corr = em.runtime("cudaMemcpyAsync", launch_end - c // 3, launch_end, ext)
        em.gpu("gpu_memcpy", K.D2H, COMPUTE_STREAM, d2h_start, drain, ext, corr, bytes=4)
        em.runtime("cudaStreamSynchronize", sync_start, ret, ext)
        rec.memcpy.append((d2h_start, drain))
        rec.labels.append((h, item_end, "sync_call", -1, -1))
        rec.sync_return = item_end
        self.free = drain
        self.h = item_end
        stall = ns(p.sync_stall * self.f["stall"])
        host_ops(
            em, ("aten::to", "aten::_to_copy", "aten::add_", "aten::div"), self.h, self.h + stall
        )
        self.h += stall
        if self.rank == 0:
            red = ns(p.reduce_time * self.f["reduce"])
            em.op("user_annotation", "reduce_metrics", self.h, self.h + red)
            host_ops(
                em, ("aten::stack", "aten::mean", "aten::sum", "aten::div"), self.h, self.h + red
            )
            rec.labels.append((self.h, self.h + red, "reduction", -1, -1))
            self.h += red
        self.arrival = self.h
        return self.arrival

    def finish(self, release: int, last: int, last_arrival: int) -> StepRecord:
        """Close the barrier (N > 1) and the ProfilerStep; returns the step's intervals."""
        plan, em, rec = self.plan, self.em, self.rec
        end = self.arrival
        if plan.n > 1:
            a = self.arrival
            em.op("cpu_op", "c10d::barrier", a, release)
            inset = min(500, (release - a) // 10)
            seq = self.index * (plan.params.buckets + 1) + plan.params.buckets
            em.op("cpu_op", "record_param_comms", a + inset, release - inset,
                  **_nccl_args(plan, "barrier", 1, seq))  # fmt: skip
            rec.labels.append((a, release, "collective", last, max(a, last_arrival)))
            end = release
        em.op("user_annotation", f"ProfilerStep#{rec.step}", rec.start, end)
        rec.end = end
        return rec


@dataclass(frozen=True)
class StepShared:
    """What ranks agreed on in one step: its start, the collectives, the barrier."""

    start: int
    comm: CommShared
    release: int
    last: int
    last_arrival: int


def combine_comm(plan: Plan, ready: dict[int, list[int]], factors: np.ndarray) -> CommShared:
    """A bucket's transfer starts once every rank is ready and the previous bucket is done."""
    starts: list[int] = []
    ends: list[int] = []
    late: list[int] = []
    prev = -1
    for b in range(len(plan.bucket_after)):
        rank = max(ready, key=lambda r: (ready[r][b], -r))
        start = max(ready[rank][b], prev)
        prev = start + plan.transfer_ns(b, float(factors[b]))
        starts.append(start)
        ends.append(prev)
        late.append(rank)
    return CommShared(starts, ends, late)


def run_steps(
    plan: Plan, seed: int, steps: int, ranks: list[int]
) -> tuple[list[StepShared], dict[int, list[StepRecord]]]:
    """Timing pass over ``ranks`` (all ranks, or representatives when noise-free)."""
    p = plan.params
    factors = {r: rank_factors(p, plan.n, seed, r, steps) for r in ranks}
    cfac = comm_factors(p, plan.n, seed, steps)
    shared: list[StepShared] = []
    records: dict[int, list[StepRecord]] = {r: [] for r in ranks}
    start = T0_NS
    for k in range(steps):
        rs = {
            r: RankStep(
                plan, r, k, start, factors[r][k], Emitter(rank=r, pid=0, device=0, enabled=False)
            )
            for r in ranks
        }
        comm = combine_comm(plan, {r: s.front() for r, s in rs.items()}, cfac[k])
        arrivals = {r: s.back(comm) for r, s in rs.items()}
        last = max(arrivals, key=lambda r: (arrivals[r], -r))
        release = arrivals[last] + (ns(p.barrier_latency) if plan.n > 1 else 0)
        for r, s in rs.items():
            records[r].append(s.finish(release, last, arrivals[last]))
        shared.append(StepShared(start, comm, release, last, arrivals[last]))
        start = release
    return shared, records


def emit_rank(
    plan: Plan, seed: int, rank: int, shared: list[StepShared], em: Emitter
) -> list[StepRecord]:
    """Event pass for one rank, replaying the shared times of the timing pass."""
    factors = rank_factors(plan.params, plan.n, seed, rank, len(shared))
    out = []
    for k, sh in enumerate(shared):
        s = RankStep(plan, rank, k, sh.start, factors[k], em)
        s.front()
        s.back(sh.comm)
        out.append(s.finish(sh.release, sh.last, sh.last_arrival))
    return out
