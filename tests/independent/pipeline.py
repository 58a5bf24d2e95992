"""A pipeline-parallel study with exact truth: 1F1B over ``stages`` stages x DP replicas.

Why its own scheduler: sched.py advances every rank in lockstep through one program, but the
stages of a pipeline run different programs (stage s does ``p - s - 1`` warm-up forwards,
then one forward / one backward, then the cool-down backwards) and wait on each other
microbatch by microbatch. Here each replica's stages are scheduled event by event, op by op,
as their dependencies resolve; the replicas meet at each stage's gradient AllReduce.

The job: a fixed global batch of ``microbatches`` (M) microbatches of fixed size, so each
replica runs m = M / DP microbatches per step: compute per step shrinks as 1/DP through fewer
microbatches, while the pipeline's fill and drain (about ``(p - 1)`` forward + backward
times plus their transfers) does not shrink: its share (p - 1) / (m + p - 1) grows with N.

Conventions (stated, not measured from a real job):
- rank = stage * DP + dp_index (Megatron's default order, pipeline outermost: a stage's DP
  replicas are consecutive ranks, its pipeline peers DP ranks apart); the network is one
  tier (``Net`` flat: every link as fast as intra-node, also where a DP group outgrows a
  node at the targets), so the DP AllReduce costs the ring's
  ``2 (g - 1) alpha + 2 (g - 1) / g bytes / bw`` at any N.
- the host launches ahead (no host sync until ``loss.item()``), as PyTorch does with NCCL;
  a recv kernel starts when launched on its stream and ends when the data arrived
  (the sender's send kernel start + ``alpha + bytes / bw``), so it holds the wait + the
  transfer; a send ends its transfer after its start (eager: no rendezvous with the recv).
- p2p is recorded as record_param_comms with Collective name ``send`` / ``recv``, Group size
  2, the pair's process group (``pp_<s>_<s+1>``), and ``ncclDevKernel_SendRecv`` kernels.
- data loading on stage 0 only; gamma noise (cv ``noise``) on every duration.

Interleaved 1F1B (``virtual`` v > 1 model chunks per rank, Megatron's virtual pipeline
stages): chunk c of stage s holds virtual stage ``c p + s`` of ``v p``, each a 1/v share of
the stage's layers (its forward ``fwd / v``, its backward ``bwd_ratio fwd / v``), so a
microbatch crosses the ring of stages v times and the last stage feeds the first
(``pp_0_<p-1>``; with two stages that is the same pair). The order of each stage's chunk
passes is Megatron-LM's ``forward_backward_pipelining_with_interleaving``
(megatron/core/pipeline_parallel/schedules.py) with its schedule table
(``get_schedule_table``, microbatch groups of ``p``): ``(p - s - 1) 2 + (v - 1) p`` warm-up
forward passes (capped at the ``m v`` passes of the step; all of them when the cap bites), then
one forward / one backward, then the cool-down backwards; backward passes run the chunks in
reverse. ``virtual = 1`` is plain 1F1B (:func:`one_f_one_b`) and writes the same bytes as before
interleaving existed. Why: the bubble shrinks to ``(p - 1) (t_f + t_b) / v`` at v times the
send/recv count, and the package must read v from the trace to rebuild it.

Truth: the mean step over ranks and many steps at the target N (DP grows, M and p fixed),
from this scheduler with the same noise. The bubble: per rank and step, the time its GPU
runs nothing but p2p kernels (a recv waiting for the neighbour stage, a send), i.e. idles on
the other stages: fill, drain, per-microbatch transfers (``bubble_s``, seconds per step, mean
over ranks; ``bubble_share``: of the step; ``bubble_by_stage_s``: mean per stage). The same
cut as the replay's ``pipeline_bubble``; the idle of a stage after its last microbatch while
another stage drains is not counted where the stage runs its own AllReduce or optimizer.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from .names import ADAM, GELU, GEMM_BIG, nccl_kernel
from .pipeline_trace import write_ranks
from .sched import Net, protocol, transfer_time

COMPUTE = 7
RECV = 33  # NCCL stream of the p2p recvs
SEND = 34  # NCCL stream of the p2p sends
COMM = 52  # NCCL stream of the DP group
SENDRECV = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
LAUNCH = 4.5e-6


@dataclass(frozen=True)
class PipePattern:
    """What one PP study runs (seconds, bytes)."""

    name: str = "pipeline"
    stages: int = 4
    dp_sizes: tuple[int, ...] = (1, 2, 4, 8)  # measured DP degrees (N = stages * DP)
    dp_targets: tuple[int, ...] = (16, 32, 64)  # 2x, 4x, 8x the largest measured N
    microbatches: int = 64  # global batch M (per step, all replicas together)
    virtual: int = 1  # model chunks per rank (interleaved 1F1B's virtual stages; 1: plain)
    fwd: float = 0.4e-3  # one microbatch's forward on one stage (fixed microbatch size)
    bwd_ratio: float = 2.0
    act_bytes: float = 4e6  # activation (and its gradient) sent between stages
    grad_bytes: float = 40e6  # parameters of one stage (its DP AllReduce)
    optimizer: float = 1.0e-3
    load: float = 0.6e-3
    noise: float = 0.04
    net: Net = field(default_factory=Net)
    steps: int = 4
    truth_steps: int = 24
    t0_ns: int = 1_812_345_678_000
    #: the DP AllReduce's transfer free (the serial-fraction truth's step at infinite N,
    #: tests/independent/serial_pipeline.py; p2p activations of a microbatch keep theirs)
    free_collectives: bool = False

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(self.stages * d for d in self.dp_sizes)

    @property
    def targets(self) -> tuple[int, ...]:
        return tuple(self.stages * d for d in self.dp_targets)


def one_f_one_b(p: int, s: int, m: int) -> list[tuple[str, int]]:
    """Stage s's op order: ``p - s - 1`` warm-up forwards, 1F1B, then the cool-down."""
    warm = min(p - s - 1, m)
    ops = [("F", i) for i in range(warm)]
    f, b = warm, 0
    while f < m:
        ops.append(("F", f))
        ops.append(("B", b))
        f, b = f + 1, b + 1
    ops += [("B", i) for i in range(b, m)]
    return ops


def schedule_table(p: int, m: int, v: int) -> list[tuple[int, int]]:
    """Megatron's order of (microbatch, chunk) forward passes: microbatches in groups of
    ``p``, each group through chunk 0, then chunk 1, ... (the backward passes take the same
    order with the chunks reversed)."""
    out = []
    for lo in range(0, m, p):
        group = range(lo, min(lo + p, m))
        out += [(i, c) for c in range(v) for i in group]
    return out


def interleaved(p: int, s: int, m: int, v: int) -> list[tuple[str, int, int]]:
    """Stage s's (F|B, microbatch, chunk) order in interleaved 1F1B (module docstring):
    Megatron's ``(p - s - 1) 2 + (v - 1) p`` warm-up forwards, capped at the step's ``m v``
    passes, then forward k + warm-up / backward k, then the cool-down backwards."""
    table = schedule_table(p, m, v)
    total = len(table)
    warm = min((p - s - 1) * 2 + (v - 1) * p, total)
    fwd = [("F", i, c) for i, c in table]
    bwd = [("B", i, v - 1 - c) for i, c in table]
    ops = fwd[:warm]
    for k in range(total - warm):
        ops += [fwd[warm + k], bwd[k]]
    return ops + bwd[total - warm :]


class _Rank:
    """One rank's clocks (host, streams) and recorded events."""

    def __init__(self, rank: int, rng: np.random.Generator, noise: float, record: bool) -> None:
        self.rank = rank
        self.rng = rng
        self.noise = noise
        self.record = record
        self.h = 0.0
        self.free: dict[int, float] = {COMPUTE: 0.0, RECV: 0.0, SEND: 0.0, COMM: 0.0}
        self.events: list[dict[str, object]] = []
        self.corr = 1000 + rank
        self.ext = 1
        self.p2p_iv: list[tuple[float, float]] = []  # this step's p2p kernels
        self.other_iv: list[tuple[float, float]] = []  # this step's other device work
        self.waited = 0.0
        self._factors: list[float] = []
        self._block = 32

    def jit(self, t: float) -> float:
        if self.noise <= 0 or t <= 0:
            return t
        if not self._factors:
            # a block of gamma factors per generator call: one call per event was most of
            # the generator's time; the block doubles up to 4096, so short runs draw little
            k = 1.0 / self.noise**2
            self._block = min(4096, 2 * self._block)
            self._factors = self.rng.gamma(k, 1.0 / k, self._block).tolist()[::-1]
        return t * self._factors.pop()

    def ev(self, cat: str, name: str, where: str, a: float, b: float, **args: object) -> None:
        if where != "host":
            (self.p2p_iv if where in (str(RECV), str(SEND)) else self.other_iv).append((a, b))
        if self.record:
            self.events.append({"cat": cat, "name": name, "where": where, "a": a, "b": b,
                                "args": args})  # fmt: skip

    def host(self, dt: float) -> None:
        self.h += self.jit(dt)

    def op(self) -> float:
        a = self.h
        self.host(1.5e-6)
        return a

    def op_end(self, a: float, name: str, cat: str = "cpu_op", **args: object) -> None:
        self.host(1.0e-6)
        self.ext += 1
        self.ev(cat, name, "host", a, self.h, **{"External id": self.ext}, **args)

    def runtime(self, name: str, dt: float = 2e-6) -> int:
        self.corr += 1
        a = self.h
        self.host(dt)
        cbid = {"cudaLaunchKernel": 211, "cudaStreamSynchronize": 131, "cudaEventRecord": 135,
                "cudaStreamWaitEvent": 147, "cudaMemcpyAsync": 41}.get(name, 0)  # fmt: skip
        self.ev("cuda_runtime", name, "host", a, self.h, correlation=self.corr,
                **{"External id": self.ext, "cbid": cbid})  # fmt: skip
        return self.corr

    def kernel(self, s: int, name: str, gpu: float, cat: str = "kernel", fixed: bool = False,
               ready: float = 0.0, **args: object) -> tuple[float, float]:  # fmt: skip
        corr = self.runtime("cudaLaunchKernel" if cat == "kernel" else "cudaMemcpyAsync", LAUNCH)
        a = max(self.free[s], self.h, ready)
        b = a + (gpu if fixed else self.jit(gpu))
        self.free[s] = b
        self.ev(cat, name, str(s), a, b, correlation=corr, stream=s, **args)
        return a, b

    def wait_stream(self, waiter: int, producer: int) -> None:
        done = self.free[producer]
        self.runtime("cudaEventRecord", 1.5e-6)
        self.runtime("cudaStreamWaitEvent", 1.2e-6)
        self.free[waiter] = max(self.free[waiter], done)

    def compute(self, name: str, t: float, op: str) -> None:
        a = self.op()
        self.kernel(COMPUTE, name, t, device=0)
        self.op_end(a, op)


def _p2p_args(kind: str, nbytes: float, pg: str, peer: int) -> dict[str, object]:
    nel = int(nbytes // 2)
    return {"Collective name": kind, "In msg nelems": nel, "Out msg nelems": nel,
            "Group size": 2, "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]",
            "Process Group Name": pg, "Process Group Description": "pipeline_pair",
            "Process Group Ranks": str(sorted((peer, peer)))}  # fmt: skip


class _Pipe:
    """One replica's stages through one step of 1F1B (send starts keyed by op)."""

    def __init__(self, pat: PipePattern, ranks: list[_Rank], m: int, dp: int) -> None:
        self.pat, self.ranks, self.m, self.dp = pat, ranks, m, dp
        # (F|B, microbatch, to virtual stage c p + s; = the stage without interleaving)
        self.sent: dict[tuple[str, int, int], float] = {}

    def _xfer(self) -> float:
        alpha, bw = self.pat.net.tier(2)
        return alpha + self.pat.act_bytes / (bw * protocol(self.pat.act_bytes)[1])

    def _recv(self, r: _Rank, s: int, peer_s: int, key: tuple[str, int, int]) -> None:
        peer_s %= self.pat.stages  # interleaved: the last stage feeds the first
        peer = r.rank + (peer_s - s) * self.dp
        lo, hi = sorted((s, peer_s))
        pg = f"pp_{lo}_{hi}"
        args = _p2p_args("recv", self.pat.act_bytes, pg, peer)
        args["Process Group Ranks"] = str(sorted((r.rank, peer)))
        a = r.op()
        b = r.op()
        corr = r.runtime("cudaLaunchKernel", LAUNCH)
        ka = max(r.free[RECV], r.h)
        kb = max(ka + 2e-6, self.sent[key] + self._xfer())
        r.free[RECV] = kb
        r.ev("kernel", SENDRECV, str(RECV), ka, kb, correlation=corr, stream=RECV, **args)
        r.op_end(b, "record_param_comms", **args)
        r.op_end(a, "c10d::recv_")
        r.wait_stream(COMPUTE, RECV)

    def _send(self, r: _Rank, s: int, peer_s: int, key: tuple[str, int, int]) -> None:
        peer_s %= self.pat.stages
        peer = r.rank + (peer_s - s) * self.dp
        lo, hi = sorted((s, peer_s))
        args = _p2p_args("send", self.pat.act_bytes, f"pp_{lo}_{hi}", peer)
        args["Process Group Ranks"] = str(sorted((r.rank, peer)))
        a = r.op()
        b = r.op()
        r.wait_stream(SEND, COMPUTE)
        corr = r.runtime("cudaLaunchKernel", LAUNCH)
        ka = max(r.free[SEND], r.h)
        kb = ka + self._xfer() * r.jit(1.0)
        self.sent[key] = ka
        r.free[SEND] = kb
        r.ev("kernel", SENDRECV, str(SEND), ka, kb, correlation=corr, stream=SEND, **args)
        r.op_end(b, "record_param_comms", **args)
        r.op_end(a, "c10d::send_")

    def _do(self, s: int, kind: str, i: int, c: int = 0) -> None:
        r, p, pat = self.ranks[s], self.pat.stages, self.pat
        u, last = c * p + s, pat.virtual * p - 1  # virtual stage, the last one
        share = pat.fwd / pat.virtual if pat.virtual > 1 else pat.fwd
        if kind == "F":
            if u > 0:
                self._recv(r, s, s - 1, ("F", i, u))
            r.compute(GEMM_BIG, 0.85 * share, "aten::linear")
            r.compute(GELU, 0.15 * share, "aten::gelu")
            if u < last:
                self._send(r, s, s + 1, ("F", i, u + 1))
        else:
            if u < last:
                self._recv(r, s, s + 1, ("B", i, u))
            r.compute(GEMM_BIG, pat.bwd_ratio * share,
                      "autograd::engine::evaluate_function: AddmmBackward0")  # fmt: skip
            if u > 0:
                self._send(r, s, s - 1, ("B", i, u - 1))

    def run(self) -> None:
        p, v = self.pat.stages, self.pat.virtual
        if v > 1:
            todo = [interleaved(p, s, self.m, v) for s in range(p)]
        else:
            todo = [[(k, i, 0) for k, i in one_f_one_b(p, s, self.m)] for s in range(p)]
        at = [0] * p
        while any(at[s] < len(todo[s]) for s in range(p)):
            moved = False
            for s in range(p):
                while at[s] < len(todo[s]):
                    kind, i, c = todo[s][at[s]]
                    u, last = c * p + s, v * p - 1
                    need = (u > 0 and kind == "F") or (u < last and kind == "B")
                    if need and (kind, i, u) not in self.sent:
                        break
                    self._do(s, kind, i, c)
                    at[s] += 1
                    moved = True
            assert moved, "1F1B deadlocked"


def _step(pat: PipePattern, ranks: list[_Rank], dp: int, k: int) -> None:
    p = pat.stages
    m = pat.microbatches // dp
    starts = [r.h for r in ranks]
    for r in ranks:
        if r.rank < dp:  # stage 0
            a = r.op()
            r.host(pat.load)
            r.op_end(a, "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
                     "user_annotation")  # fmt: skip
            a = r.op()
            r.kernel(COMPUTE, "Memcpy HtoD (Pinned -> Device)", 20e-6, cat="gpu_memcpy")
            r.op_end(a, "aten::copy_")
    for d in range(dp):
        _Pipe(pat, ranks[d::dp], m, dp).run()
    if dp > 1:  # DP gradient AllReduce per stage, over the replicas
        t = transfer_time(pat.net, "allreduce", pat.grad_bytes, dp)
        nel = int(pat.grad_bytes // 2)
        for s in range(p):
            group = ranks[s * dp : (s + 1) * dp]
            arrive = []
            calls = []
            for r in group:
                a = r.op()
                b = r.op()
                r.wait_stream(COMM, COMPUTE)
                corr = r.runtime("cudaLaunchKernel", LAUNCH)
                arrive.append(max(r.free[COMM], r.h))
                calls.append((a, b, corr))
            spread = float(group[0].rng.gamma(400.0, 1 / 400.0)) if pat.noise > 0 else 1.0
            end = max(arrive) + (0.0 if pat.free_collectives else t * spread)
            args = {"Collective name": "allreduce", "In msg nelems": nel, "Out msg nelems": nel,
                    "Group size": dp, "dtype": "BFloat16", "In split size": "[]",
                    "Out split size": "[]", "Process Group Name": f"dp_{s}",
                    "Process Group Description": "data_parallel",
                    "Process Group Ranks": str([g.rank for g in group])}  # fmt: skip
            kern = nccl_kernel("allreduce", pat.grad_bytes, False)
            for r, x, (a, b, corr) in zip(group, arrive, calls, strict=True):
                r.free[COMM] = end
                r.ev("kernel", kern, str(COMM), x, end, correlation=corr, stream=COMM, **args)
                r.op_end(b, "record_param_comms", **args)
                r.op_end(a, "c10d::allreduce_")
    for r in ranks:
        a = r.op()
        r.wait_stream(COMPUTE, COMM)
        r.op_end(a, "torch.distributed.ddp.reducer::finalize_backward")
        a = r.op()
        r.kernel(COMPUTE, ADAM, pat.optimizer, device=0)
        r.op_end(a, "Optimizer.step#AdamW.step", "user_annotation")
        a = r.op()
        r.kernel(COMPUTE, "Memcpy DtoH (Device -> Pageable)", 3e-6, cat="gpu_memcpy")
        r.corr += 1
        c = r.h
        r.h = max(r.h + 2e-6, r.free[COMPUTE] + 3e-6)
        r.ev("cuda_runtime", "cudaStreamSynchronize", "host", c, r.h, correlation=r.corr,
             **{"External id": r.ext, "cbid": 131})  # fmt: skip
        r.op_end(a, "aten::item")
        r.host(3e-6)
    for r, a in zip(ranks, starts, strict=True):
        r.waited += _only(r.p2p_iv, r.other_iv)
        r.p2p_iv, r.other_iv = [], []
        r.ev("user_annotation", f"ProfilerStep#{k + 2}", "host", a, r.h)
        r.h += 2e-6


def _only(mine: list[tuple[float, float]], other: list[tuple[float, float]]) -> float:
    """Length of the union of ``mine`` outside the union of ``other``."""
    pts = sorted({x for iv in (*mine, *other) for x in iv})
    if len(pts) < 2:
        return 0.0
    edges = np.asarray(pts)
    mid = (edges[:-1] + edges[1:]) / 2

    def cover(ivs: list[tuple[float, float]]) -> np.ndarray:
        c = np.zeros(len(mid), dtype=bool)
        for a, b in ivs:
            c |= (mid >= a) & (mid < b)
        return c

    keep = cover(mine) & ~cover(other)
    return float(np.diff(edges)[keep].sum())


def run(pat: PipePattern, dp: int, steps: int, seed: int, record: bool) -> list[_Rank]:
    """``steps`` steps of the job at DP degree ``dp`` (``stages * dp`` ranks)."""
    if pat.microbatches % dp:
        raise ValueError(f"{pat.microbatches} microbatches do not split over DP = {dp}")
    rng = np.random.default_rng(seed)
    ranks = [_Rank(r, rng, pat.noise, record) for r in range(pat.stages * dp)]
    for k in range(steps):
        _step(pat, ranks, dp, k)
    return ranks


def true_step(pat: PipePattern, dp: int, seed: int) -> tuple[float, list[float]]:
    """Mean step (s) over ranks and steps at DP = dp, and each stage's mean bubble."""
    ranks = run(pat, dp, pat.truth_steps + 1, seed + 7919 * dp, record=False)
    # the first step's start is 0 on every rank; steps after it run back to back
    total = float(np.mean([r.h for r in ranks]))
    steps = pat.truth_steps + 1
    per_stage = [float(np.mean([r.waited for r in ranks[s * dp : (s + 1) * dp]])) / steps
                 for s in range(pat.stages)]  # fmt: skip
    return total / steps, per_stage


def write_run(pat: PipePattern, dp: int, folder: str, seed: int) -> None:
    """Kineto JSON per rank of the run at DP = dp (``pipeline_trace``)."""
    write_ranks(pat, run(pat, dp, pat.steps, seed + dp, record=True), dp, folder)


def build_study(pat: PipePattern, out: str, seed: int = 1) -> dict[str, object]:
    """Write ``out/<N>gpus/`` runs and ``out/truth.json``; returns the truth (speedups over
    the smallest measured N; per N the bubble's seconds per step and share of the step, mean
    over ranks, and its seconds per stage)."""
    for dp in pat.dp_sizes:
        write_run(pat, dp, os.path.join(out, f"{pat.stages * dp}gpus"), seed)
    res = {pat.stages * dp: true_step(pat, dp, seed) for dp in (*pat.dp_sizes, *pat.dp_targets)}
    base = min(pat.sizes)
    truth = {
        "pattern": pat.name,
        "step_time": {str(n): t for n, (t, _) in res.items()},
        "speedup": {str(n): res[base][0] / t for n, (t, _) in res.items()},
        "bubble_s": {str(n): float(np.mean(b)) for n, (_, b) in res.items()},
        "bubble_share": {str(n): float(np.mean(b)) / t for n, (t, b) in res.items()},
        "bubble_by_stage_s": {str(n): b for n, (_, b) in res.items()},
    }
    with open(os.path.join(out, "truth.json"), "w") as fh:
        json.dump(truth, fh, indent=1)
    return truth
