"""An event-level scheduler for SPMD training steps, written apart from ``tracescale.simulate``.

Why a second one: projections must hold for studies built without this repository's
conventions. This scheduler shares no code, stream ids, kernel spellings, argument
conventions, collective cost model or noise shape with the package's simulator. All ranks
advance in lockstep as numpy vectors (one entry per rank); a collective ends on every rank of
its process group at the latest arrival plus its transfer, so the step time of N ranks (and
its truth at any N) comes from the schedule itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Vec = np.ndarray


@dataclass(frozen=True)
class Style:
    """Trace conventions and noise shapes that real jobs differ in (defaults: gen.py's own)."""

    #: stream waits as host cudaEventRecord/cudaStreamWaitEvent ("host"), plus Kineto's GPU-side
    #: ``cuda_sync`` "Stream Wait Event" with the record's correlation ("events"), or not
    #: recorded at all ("none": the consumer's kernels just start late)
    waits: str = "host"
    noise: str = "gamma"  # duration noise: "gamma" or "lognormal" (same mean and cv)
    bwd_thread: bool = False  # backward's host ops on the autograd engine's own thread
    first_step: int = 2  # number of the first ProfilerStep#N
    fp32: bool = False  # fp32 messages and NCCL >= 2.19 ``ncclDevKernelArgsStorage`` kernels
    coalesced: bool = False  # FSDP2's ``*_coalesced`` collective names
    #: per rank-step data-loading delay: "lomax", "lognormal", "stall" or "mixed" (a lognormal
    #: body of a tenth of the stall, sigma 0.5, plus the rare stalls)
    delay: str = "lomax"
    host2: bool = False  # a second host thread doing unrelated work


@dataclass(frozen=True)
class Net:
    """Per-hop latency (s) and bandwidth (B/s) inside a node and across nodes."""

    alpha: float = 8e-6
    bandwidth: float = 150e9
    inter_alpha: float = 25e-6
    inter_bandwidth: float = 25e9
    gpus_per_node: int = 8
    flat: bool = True  # one tier whatever the group size
    bcast_alpha: float | None = None  # per-hop latency of Broadcast when it differs

    def tier(self, span: int) -> tuple[float, float]:
        """Link of a group whose members lie ``span`` consecutive ranks apart end to end (its
        size when contiguous): it crosses nodes when that is more than a node holds."""
        if self.flat or span <= self.gpus_per_node:
            return self.alpha, self.bandwidth
        return self.inter_alpha, self.inter_bandwidth


PROTO = (("LL", 1 << 16, 0.35), ("LL128", 1 << 23, 0.85), ("SIMPLE", math.inf, 0.95))


def protocol(nbytes: float) -> tuple[str, float]:
    for name, bound, eff in PROTO:
        if nbytes < bound:
            return name, eff
    raise AssertionError("unreachable")


def transfer_time(net: Net, coll: str, full_bytes: float, n: int, span: int = 0) -> float:
    """Ring cost of one collective over n ranks once all arrived (seconds); ``span``: how
    many consecutive ranks its members reach over (default n: a contiguous block)."""
    if n <= 1:
        return 2e-6  # a local copy kernel
    alpha, bw = net.tier(span or n)
    _, eff = protocol(full_bytes)
    bw *= eff
    if coll == "allreduce":
        return 2 * (n - 1) * alpha + 2 * (n - 1) / n * full_bytes / bw
    if coll == "broadcast":
        a = net.bcast_alpha if net.bcast_alpha is not None else alpha
        return (n - 1) * a + full_bytes / bw
    return (n - 1) * alpha + (n - 1) / n * full_bytes / bw


@dataclass
class Ev:
    """One recorded complete event for every rank (vectors of start/end in seconds)."""

    cat: str
    name: str
    where: str  # "host" or a stream id as str
    start: Vec
    end: Vec
    args: dict[str, Any]


@dataclass
class Sched:
    n: int
    rng: np.random.Generator
    style: Style = field(default_factory=Style)
    noise: float = 0.04
    record: bool = True
    launch: float = 4.5e-6
    events: list[Ev] = field(default_factory=list)
    corr: int = 1000
    ext: int = 1
    h: Vec = field(init=False)
    free: dict[int, Vec] = field(default_factory=dict)
    thread: int = 0  # host thread the next host events go on (0: the main thread)
    free_transfers: bool = False  # collectives take no time once all arrived (infinite N)

    def __post_init__(self) -> None:
        self.h = np.zeros(self.n)
        self._factors: Vec = np.zeros((0, self.n))
        self._drawn = 0

    # ---- primitives -------------------------------------------------------------------
    def jit(self, t: float) -> Vec:
        """t with multiplicative gamma noise per rank (mean exactly t)."""
        if self.noise <= 0 or t <= 0:
            return np.full(self.n, t)
        if self._drawn >= len(self._factors):
            self._refill()
        self._drawn += 1
        return t * self._factors[self._drawn - 1]

    def _refill(self) -> None:
        """The next block of per-rank noise factors, drawn at once: one generator call per
        event was most of the generator's time (a study draws millions). The block doubles
        up to 4096 events, so a short run draws little more than it uses."""
        rows = min(4096, max(64, 2 * len(self._factors)))
        if self.style.noise == "lognormal":
            sig2 = np.log1p(self.noise**2)
            self._factors = self.rng.lognormal(-sig2 / 2, np.sqrt(sig2), (rows, self.n))
        else:
            k = 1.0 / self.noise**2
            self._factors = self.rng.gamma(k, 1.0 / k, (rows, self.n))
        self._drawn = 0

    def stream(self, s: int) -> Vec:
        return self.free.setdefault(s, np.zeros(self.n))

    def rec(self, cat: str, name: str, where: str, a: Vec, b: Vec, **args: Any) -> None:
        if self.record:
            if where == "host" and self.thread:
                where = f"host{self.thread}"
            self.events.append(Ev(cat, name, where, a.copy(), b.copy(), args))

    def host(self, dt: float) -> None:
        self.h = self.h + self.jit(dt)

    def op_begin(self) -> Vec:
        start = self.h.copy()
        self.host(1.5e-6)
        return start

    def op_end(self, start: Vec, name: str, cat: str = "cpu_op", **args: Any) -> None:
        self.host(1.0e-6)
        self.ext += 1
        self.rec(cat, name, "host", start, self.h, **{"External id": self.ext}, **args)

    def runtime(self, name: str, dt: float = 2e-6, **args: Any) -> int:
        self.corr += 1
        a = self.h.copy()
        self.host(dt)
        self.rec("cuda_runtime", name, "host", a, self.h, correlation=self.corr,
                 **{"External id": self.ext, "cbid": _CBID.get(name, 0)}, **args)  # fmt: skip
        return self.corr

    def kernel(self, s: int, name: str, gpu: float, cat: str = "kernel", **args: Any) -> None:
        corr = self.runtime("cudaLaunchKernel" if cat == "kernel" else "cudaMemcpyAsync",
                            self.launch)  # fmt: skip
        a = np.maximum(self.stream(s), self.h)
        b = a + self.jit(gpu)
        self.free[s] = b
        self.rec(cat, name, str(s), a, b, correlation=corr, stream=s, **args)

    def wait_stream(self, waiter: int, producer: int) -> None:
        """cudaEventRecord on producer + cudaStreamWaitEvent on waiter (as ``style.waits``)."""
        self.wait_event(waiter, self.record_event(producer))

    def record_event(self, producer: int) -> tuple[Vec, int, int]:
        """An event recorded on ``producer`` now: (its work so far, record correlation, stream)."""
        done = self.stream(producer).copy()
        corr = self.runtime("cudaEventRecord", 1.5e-6) if self.style.waits != "none" else -1
        return done, corr, producer

    def wait_event(self, waiter: int, event: tuple[Vec, int, int]) -> None:
        """``waiter`` waits for a recorded event (host call, plus Kineto's GPU-side record of
        it under ``style.waits == "events"``; nothing at all under "none")."""
        done, record, producer = event
        self.free[waiter] = np.maximum(self.stream(waiter), done)
        if self.style.waits == "none":
            return
        a = self.h.copy()
        wait = self.runtime("cudaStreamWaitEvent", 1.2e-6)
        if self.style.waits == "events":  # CUPTI's record of the call, on the waiting stream
            self.rec("cuda_sync", "Stream Wait Event", str(waiter), a, self.h,
                     correlation=wait, stream=waiter, cuda_sync_kind="Stream Wait Event",
                     wait_on_stream=producer, wait_on_cuda_event_record_corr_id=record,
                     wait_on_cuda_event_id=record % 97, **{"External id": self.ext})  # fmt: skip

    def sync(self, s: int, name: str = "cudaStreamSynchronize") -> None:
        self.corr += 1
        a = self.h.copy()
        self.h = np.maximum(self.h + 2e-6, self.stream(s) + 3e-6)
        self.rec("cuda_runtime", name, "host", a, self.h, correlation=self.corr,
                 **{"External id": self.ext, "cbid": _CBID.get(name, 0)})  # fmt: skip

    def collective(
        self,
        stream: int,
        after: int | None,
        coll: str,
        full_bytes: float,
        group: int,
        net: Net,
        kernel: str,
        args: dict[str, Any],
        c10d: str,
        annotation: str,
        strided: bool = False,
    ) -> None:
        """A collective over groups of ``group`` ranks on ``stream``: consecutive ranks, or
        (``strided``) the ranks equal modulo ``n / group`` (data parallel across model shards)."""
        start = self.op_begin()
        rpc = self.op_begin()
        if after is not None:
            self.wait_stream(stream, after)
        ann = self.op_begin()
        corr = self.runtime("cudaLaunchKernel", self.launch)
        arrive = np.maximum(self.stream(stream), self.h)
        span = (group - 1) * (self.n // group) + 1 if strided else group
        t = transfer_time(net, coll, full_bytes, group, span) * float(
            self.rng.gamma(400.0, 1 / 400.0) if self.noise > 0 else 1.0
        )
        if self.free_transfers:
            t = 0.0
        if strided:
            last = np.tile(arrive.reshape(group, -1).max(axis=0), group)
        else:
            last = arrive.reshape(-1, group).max(axis=1).repeat(group)
        end = last + t
        self.free[stream] = end
        self.rec(
            "kernel", kernel, str(stream), arrive, end, correlation=corr, stream=stream, **args
        )
        self.op_end(ann, annotation, cat="user_annotation")
        self.op_end(rpc, "record_param_comms", **args)
        self.op_end(start, c10d)


_CBID = {
    "cudaLaunchKernel": 211,
    "cudaMemcpyAsync": 41,
    "cudaStreamSynchronize": 131,
    "cudaDeviceSynchronize": 165,
    "cudaEventRecord": 135,
    "cudaStreamWaitEvent": 147,
}


def draw_delay(s: Sched, scale: float, shape: float) -> Vec:
    """Per rank data-loading delay of one step, as ``s.style.delay``: ``scale`` x Lomax(shape),
    ``scale`` x lognormal(0, sigma=shape), or a stall of ``scale`` with probability ``shape``."""
    if s.style.delay == "lognormal":
        return scale * s.rng.lognormal(0.0, shape, s.n)
    if s.style.delay == "stall":
        return scale * (s.rng.random(s.n) < shape)
    if s.style.delay == "mixed":
        return scale * (0.1 * s.rng.lognormal(0.0, 0.5, s.n) + (s.rng.random(s.n) < shape))
    return scale * s.rng.pareto(shape, s.n)


def mean_delay(style: Style, scale: float, shape: float) -> float:
    """The mean of :func:`draw_delay` (infinite for a Lomax tail of shape 1 or less)."""
    if style.delay == "lognormal":
        return scale * math.exp(shape**2 / 2)
    if style.delay == "stall":
        return scale * shape
    if style.delay == "mixed":
        return scale * (0.1 * math.exp(0.125) + shape)
    return scale / (shape - 1) if shape > 1 else math.inf


def unrelated_host_work(s: Sched, until: float) -> None:
    """A second host thread (pin memory, logging) busy with its own ops: no kernels, no waits."""
    t = np.zeros(s.n)
    names = ("aten::pin_memory", "aten::empty", "aten::copy_", "aten::to")
    k = 0
    while float(t.min()) < until:
        a = t + s.rng.exponential(400e-6, s.n)
        b = a + s.rng.uniform(20e-6, 300e-6, s.n)
        s.ext += 1
        s.events.append(Ev("cpu_op", names[k % 4], "host2", a, b, {"External id": s.ext}))
        t = b
        k += 1
