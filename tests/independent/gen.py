"""Independent Kineto studies with exact truth: training patterns -> rank trace files + truth.json.

The traces follow what PyTorch 2.x + NCCL write (ProfilerStep#N, cpu_op / user_annotation /
cuda_runtime / kernel / gpu_memcpy, record_param_comms with Collective name, In/Out msg nelems,
Group size, dtype, Process Group Name, distributedInfo with pg_config, deviceProperties), with
choices the package's own simulator does not make: other stream ids, bf16,
``all_gather_into_tensor`` and ``_allgather_base`` spellings, both NCCL kernel spellings, no
GPU-side sync events (stream waits only as host ``cudaEventRecord`` / ``cudaStreamWaitEvent``),
non-power-of-two world sizes, gamma noise on every duration and per-host clock skew. Truth: the
mean step time of this scheduler run at the target N with the same noise, over many steps.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import msgspec
import numpy as np

from .names import ADAM, GELU, GEMM_BIG, GEMM_SMALL, SMALL, nccl_kernel
from .sched import Net, Sched, Style, draw_delay, mean_delay, unrelated_host_work

COMPUTE = 7
COMM = 52  # NCCL stream of the default group
COMM2 = 61  # NCCL stream of a second process group
BF16 = 2

_PG_DESC = {"0": "default_pg", "1": "tp_group", "2": "dp_group", "3": "reduce_scatter_group"}


@dataclass(frozen=True)
class Pattern:
    """What one study runs; times in seconds at N = 1, bytes per bf16 tensor."""

    name: str
    sizes: tuple[int, ...]
    targets: tuple[int, ...]
    layers: int = 8
    fwd: float = 2.0e-3  # GEMM time of one layer's forward at N=1 (strong scaling: / N)
    floor: float = 6e-6  # per-kernel time that does not shrink
    layer_bytes: float = 48e6  # parameters of one layer
    act_bytes: float = 8e6  # activations AllReduced per layer (tensor parallel)
    buckets: tuple[float, ...] = (50e6, 50e6, 40e6, 25e6, 10e6, 2e6)
    optimizer: float = 1.5e-3
    load: float = 0.6e-3
    tail: float = 0.0  # scale of the heavy-tailed (Lomax) data-loading delay
    tail_shape: float = 2.2
    accumulate: int = 1  # AllReduce on every k-th step only
    tp_size: int = 0  # hybrid: tensor parallel in consecutive groups of this size, data
    # parallel (gradient AllReduce) across the groups, over N / tp_size strided ranks
    pg_config: bool = True  # distributedInfo lists the groups (else only the args name them)
    small_kernels: int = 0  # launch-bound: this many tiny kernels per step
    small_gpu: float = 60e-6  # GPU time of one tiny kernel at N=1
    bcast_bytes: float = 0.0  # a tiny Broadcast each step
    net: Net = field(default_factory=Net)
    legacy_names: bool = False  # ncclKernel_..._Sum_bf16 instead of ncclDevKernel_...
    skew: float = 0.0  # clock offset per host (s, uniform +-)
    noise: float = 0.04  # coefficient of variation of every host and device duration
    steps: int = 6
    truth_steps: int = 40
    #: trace clock origin (ns); at ~4.7e15 ns a float ts in us holds only ~2 ns, as in traces
    #: whose ts counts from boot in microseconds
    t0_ns: int = 1_812_345_678_000
    style: Style = field(default_factory=Style)  # trace conventions and noise shapes
    #: the step's structure when not :func:`one_step`'s (tests/independent/variants.py)
    step_fn: Callable[[Sched, Pattern, int], None] | None = None
    extra_pgs: tuple[str, ...] = ()  # more process groups over every rank (pg_config)
    #: rank r's pg_config at n ranks, g per node, when not the default list (a DeviceMesh's)
    pgs_fn: Callable[[int, int, int], list[dict[str, object]]] | None = None
    #: weak scaling: each rank keeps its batch (compute and input copy do not shrink with N);
    #: the truth's speedup is then the throughput speedup N T(base) / (base T(N))
    weak: bool = False
    #: the step at infinite N (tests/independent/serial.py): every share of the batch and every
    #: sharded optimizer divided away, transfers free; launches and serial work stay, and each
    #: rank's data-loading delay at its mean (the slowest of N's excess over it grows with N:
    #: an overhead, not serial)
    infinite: bool = False


def _coll(s: Sched, p: Pattern, coll: str, full: float, stream: int, after: int | None,
          pg: str, cname: str, group: int = 0, strided: bool = False,
          desc: str = "") -> None:  # fmt: skip
    n = group or s.n
    fp32 = s.style.fp32
    nel_full = int(full // (4 if fp32 else BF16))
    nel_in, nel_out = {
        "allgather": (nel_full // n, nel_full // n * n),
        "reduce_scatter": (nel_full // n * n, nel_full // n),
    }.get(coll, (nel_full, nel_full))
    args = {"Collective name": cname, "In msg nelems": nel_in, "Out msg nelems": nel_out,
            "Group size": n, "dtype": "Float" if fp32 else "BFloat16", "In split size": "[]",
            "Out split size": "[]",
            "Process Group Name": pg, "Process Group Description": desc or _PG_DESC[pg],
            "Process Group Ranks": ("strided" if strided else "block", n)}  # fmt: skip
    if s.style.coalesced and coll in ("allgather", "reduce_scatter"):  # FSDP2
        cname = {"allgather": "allgather_into_tensor_coalesced",
                 "reduce_scatter": "reduce_scatter_tensor_coalesced"}[coll]  # fmt: skip
        args["Collective name"] = cname
    ann = {"_allgather_base": "nccl:_all_gather_base", "all_gather_into_tensor":
           "nccl:all_gather_into_tensor", "reduce_scatter_tensor": "nccl:reduce_scatter_tensor",
           "allgather_into_tensor_coalesced": "nccl:all_gather_into_tensor_coalesced",
           "reduce_scatter_tensor_coalesced": "nccl:reduce_scatter_tensor_coalesced",
           "allreduce": "nccl:all_reduce", "broadcast": "nccl:broadcast"}[cname]  # fmt: skip
    c10d = {"allgather": "c10d::_allgather_base_", "reduce_scatter": "c10d::_reduce_scatter_base_",
            "allreduce": "c10d::allreduce_", "broadcast": "c10d::broadcast_"}[coll]  # fmt: skip
    if cname.endswith("_coalesced"):
        c10d = f"c10d::{cname}_"
    kernel = nccl_kernel(coll, full, p.legacy_names, fp32)
    s.collective(stream, after, coll, full, n, p.net, kernel, args, c10d, ann, strided)


def _gemm(s: Sched, p: Pattern, t: float, op: str = "aten::mm") -> None:
    a = s.op_begin()
    name = GEMM_BIG if t >= 200e-6 else GEMM_SMALL  # cuBLAS picks another tile when it shrinks
    s.kernel(COMPUTE, name, t + p.floor, device=0)
    s.op_end(a, op)


def _gelu(s: Sched, p: Pattern, t: float) -> None:
    a = s.op_begin()
    s.kernel(COMPUTE, GELU, t + p.floor, device=0)
    s.op_end(a, "aten::gelu")


def _dp_allreduce(s: Sched, p: Pattern, nbytes: float, tpg: int, dp: int) -> None:
    if tpg:  # each rank holds 1/tp_size of the parameters; its DP peers are strided
        _coll(s, p, "allreduce", nbytes / tpg, COMM, COMPUTE, "2", "allreduce", dp, strided=True)
    else:
        _coll(s, p, "allreduce", nbytes, COMM, COMPUTE, "0", "allreduce")


def shards(p: Pattern, n: int) -> float:
    """What each rank's share of the batch is divided by: N (strong scaling), 1 (weak)."""
    if p.infinite:
        return math.inf
    return 1.0 if p.weak else float(n)


def sharded(p: Pattern, n: int) -> float:
    """What a sharded optimizer state is divided by: N (infinite at infinite N)."""
    return math.inf if p.infinite else float(n)


def step_begin(s: Sched, p: Pattern) -> None:
    """Data loading (with the pattern's per rank-step delay) and the input copy."""
    n = s.n
    a = s.op_begin()
    load = p.load
    s.h = s.h + s.jit(load)
    if p.tail > 0 and p.infinite:  # each rank's own mean delay is serial, its spread is not
        s.h = s.h + mean_delay(s.style, p.tail, p.tail_shape)
    elif p.tail > 0:
        s.h = s.h + draw_delay(s, p.tail, p.tail_shape)
    s.op_end(a, "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "user_annotation")
    a = s.op_begin()
    s.kernel(COMPUTE, "Memcpy HtoD (Pinned -> Device)", 40e-6 / shards(p, n) + 4e-6,
             cat="gpu_memcpy")  # fmt: skip
    s.op_end(a, "aten::copy_")


def step_end(s: Sched, p: Pattern, sync_step: bool, fsdp: bool, opt: float) -> None:
    """The compute stream joins the NCCL stream, the optimizer (``opt`` s) on sync steps, and
    ``loss.item()``."""
    a = s.op_begin()
    s.wait_stream(COMPUTE, COMM)
    s.op_end(a, "FullyShardedDataParallel._post_backward_final_callback" if fsdp else
             "torch.distributed.ddp.reducer::finalize_backward")  # fmt: skip
    if sync_step:
        a = s.op_begin()
        s.kernel(COMPUTE, ADAM, opt, device=0)
        s.op_end(a, "Optimizer.step#AdamW.step", "user_annotation")
    a = s.op_begin()
    b = s.op_begin()
    s.kernel(COMPUTE, "Memcpy DtoH (Device -> Pageable)", 3e-6, cat="gpu_memcpy")
    s.sync(COMPUTE)
    s.op_end(b, "aten::_local_scalar_dense")
    s.op_end(a, "aten::item")


def one_step(s: Sched, p: Pattern, k: int) -> None:
    """One training step of pattern p on every rank; k counts steps from 0."""
    n = s.n
    step_begin(s, p)
    fsdp = p.name.startswith("fsdp")
    tp = p.name.startswith("tp") or p.tp_size > 0
    tpg = p.tp_size or 0
    dp = n // tpg if tpg else n  # data-parallel group size
    g = shards(p, n)
    for layer in range(p.layers):  # forward
        if fsdp:
            _coll(s, p, "allgather", p.layer_bytes, COMM, COMPUTE if layer == 0 else None, "0",
                  "all_gather_into_tensor")  # fmt: skip
            s.wait_stream(COMPUTE, COMM)
        _gemm(s, p, p.fwd / g, "aten::linear")
        _gelu(s, p, 0.15 * p.fwd / g)
        if tp:
            _coll(s, p, "allreduce", p.act_bytes, COMM2, COMPUTE, "1", "allreduce", tpg)
            s.wait_stream(COMPUTE, COMM2)
    if p.small_kernels:
        for _ in range(p.small_kernels):
            a = s.op_begin()
            s.kernel(COMPUTE, SMALL, p.small_gpu / g + 1.5e-6, device=0)
            s.op_end(a, "aten::copy_")
    sync_step = (k + 1) % p.accumulate == 0
    grads = not fsdp and (not tp or tpg > 0) and dp > 1  # data-parallel gradient AllReduce
    remaining = list(p.buckets)
    per_bucket = max(1, p.layers // max(1, len(p.buckets)))
    s.thread = 1 if s.style.bwd_thread else 0  # the autograd engine's device thread
    for i in range(p.layers):  # backward, last layer first
        a = s.op_begin()
        if fsdp:
            _coll(s, p, "allgather", p.layer_bytes, COMM, None, "0", "_allgather_base")
            s.wait_stream(COMPUTE, COMM)
        s.kernel(COMPUTE, GEMM_BIG if 2 * p.fwd / g >= 200e-6 else GEMM_SMALL,
                 2 * p.fwd / g + p.floor, device=0)  # fmt: skip
        s.op_end(a, "autograd::engine::evaluate_function: AddmmBackward0")
        if tp:
            _coll(s, p, "allreduce", p.act_bytes, COMM2, COMPUTE, "1", "allreduce", tpg)
            s.wait_stream(COMPUTE, COMM2)
        if fsdp and n > 1:
            _coll(
                s, p, "reduce_scatter", p.layer_bytes, COMM, COMPUTE, "0", "reduce_scatter_tensor"
            )
        elif grads and sync_step and remaining and (i + 1) % per_bucket == 0:
            _dp_allreduce(s, p, remaining.pop(0), tpg, dp)
    if grads and sync_step:
        for b in remaining:
            _dp_allreduce(s, p, b, tpg, dp)
    if s.thread:  # the main thread resumes when the engine's thread hands back
        s.thread = 0
        s.host(8e-6)
    if p.bcast_bytes and n > 1:
        _coll(s, p, "broadcast", p.bcast_bytes, COMM, COMPUTE, "0", "broadcast")
    step_end(s, p, sync_step, fsdp, p.optimizer / sharded(p, n) if fsdp else p.optimizer)


def run(p: Pattern, n: int, steps: int, seed: int, record: bool) -> tuple[Sched, list[np.ndarray]]:
    s = Sched(n, np.random.default_rng(seed), style=p.style, noise=p.noise, record=record,
              free_transfers=p.infinite)  # fmt: skip
    bounds = [s.h.copy()]
    for k in range(steps):
        a = s.h.copy()
        (p.step_fn or one_step)(s, p, k)
        s.host(3e-6)
        s.rec("user_annotation", f"ProfilerStep#{k + p.style.first_step}", "host", a, s.h)
        s.h = s.h + 2e-6  # the profiler's own bookkeeping between steps
        bounds.append(s.h.copy())
    if record and p.style.host2:
        unrelated_host_work(s, float(s.h.min()))
    return s, bounds


def true_step(p: Pattern, n: int, seed: int) -> float:
    """Expected step time at n: mean over ranks and many steps (whole accumulation cycles)."""
    steps = max(p.truth_steps, p.accumulate * 4)
    steps -= steps % p.accumulate
    _, b = run(p, n, steps + p.accumulate, seed + 7919 * n, record=False)
    return float(np.mean(b[-1] - b[p.accumulate]) / steps)


def _device_props(count: int) -> list[dict[str, object]]:
    return [{"id": i, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045477376,
             "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024, "numSms": 132,
             "warpSize": 32} for i in range(count)]  # fmt: skip


def _pg(name: str, ranks: list[int]) -> dict[str, object]:
    return {"pg_name": name, "pg_desc": _PG_DESC[name], "backend_config": "cuda:nccl",
            "pg_size": len(ranks), "ranks": ranks}  # fmt: skip


def _ranks_text(kind: object, r: int, n: int) -> str:
    """``Process Group Ranks`` of rank r: its block of consecutive ranks, or its strided set."""
    how, size = kind  # type: ignore[misc]
    if how == "strided":
        return str(list(range(r % (n // size), n, n // size)))
    return str(list(range(r - r % size, r - r % size + size)))


def write_run(p: Pattern, n: int, folder: str, seed: int) -> None:
    s, _ = run(p, n, p.steps, seed + n, record=True)
    gpn = p.net.gpus_per_node
    rng = np.random.default_rng(seed * 31 + n)
    host_skew = rng.uniform(-p.skew, p.skew, (n + gpn - 1) // gpn) if p.skew else np.zeros(n)
    os.makedirs(folder, exist_ok=True)
    t0_ns = p.t0_ns
    for r in range(n):
        pgs = [_pg("0", list(range(n)))]
        if p.tp_size:
            t = p.tp_size
            pgs.append(_pg("1", list(range(r - r % t, r - r % t + t))))
            pgs.append(_pg("2", list(range(r % t, n, t))))
        elif p.name.startswith("tp"):
            pgs.append(_pg("1", list(range(n))))
        pgs += [_pg(name, list(range(n))) for name in p.extra_pgs]
        pgs = p.pgs_fn(r, n, gpn) if p.pgs_fn else pgs
        pid = 211_000 + 17 * r
        dev = r % gpn
        off = float(host_skew[r // gpn]) if p.skew else 0.0
        evs: list[dict[str, object]] = [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python3"}},
            {
                "ph": "M",
                "name": "process_name",
                "pid": dev,
                "tid": 0,
                "args": {"name": f"GPU {dev}"},
            },
        ]
        for e in s.events:
            a_ns = t0_ns + round((float(e.start[r]) + off) * 1e9)
            ts = a_ns / 1000
            dur = (t0_ns + round((float(e.end[r]) + off) * 1e9) - a_ns) / 1000
            args = {k: v(r, n) if callable(v) else v for k, v in e.args.items()}
            if "Process Group Ranks" in args:
                args["Process Group Ranks"] = _ranks_text(args["Process Group Ranks"], r, n)
            if e.where.startswith("host"):  # host, host1 (autograd), host2 (unrelated work)
                tid = pid + 3 * int(e.where[4:] or 0)
                ev = {"ph": "X", "cat": e.cat, "name": e.name, "pid": pid, "tid": tid, "ts": ts,
                      "dur": dur, "args": args}  # fmt: skip
            else:
                args.update({"queued": 0, "device": dev, "context": 1})
                ev = {"ph": "X", "cat": e.cat, "name": e.name, "pid": dev, "tid": int(e.where),
                      "ts": ts, "dur": dur, "args": args}  # fmt: skip
                if e.cat == "gpu_memcpy":
                    args["bytes"] = 4096
            evs.append(ev)
        dist = {"backend": "nccl", "rank": r, "world_size": n, "pg_count": len(pgs),
                "pg_config": pgs if p.pg_config else [], "nccl_version": "2.20.5"}  # fmt: skip
        doc = {"schemaVersion": 1, "deviceProperties": _device_props(gpn),
               "distributedInfo": dist, "record_shapes": 0, "traceEvents": evs,
               "traceName": f"node{r // gpn}_{pid}.json", "displayTimeUnit": "ms",
               "baseTimeNanoseconds": 1_700_000_000_000_000_000}  # fmt: skip
        name = f"node{r // gpn}_{pid}.{1733000000000 + r}.pt.trace.json"
        with open(os.path.join(folder, name), "wb") as fh:
            fh.write(msgspec.json.encode(doc))  # 6x json.dumps on these documents


def build_study(p: Pattern, out: str, seed: int = 1) -> dict[str, object]:
    """Write ``out/<N>gpus/`` runs and ``out/truth.json``; returns the truth."""
    for n in p.sizes:
        write_run(p, n, os.path.join(out, f"{n}gpus"), seed)
    base = min(p.sizes)
    steps = {n: true_step(p, n, seed) for n in (*p.sizes, *p.targets)}
    truth = {"pattern": p.name, "step_time": {str(n): t for n, t in steps.items()},
             "speedup": {str(n): (n / base if p.weak else 1.0) * steps[base] / t
                         for n, t in steps.items()}}  # fmt: skip
    with open(os.path.join(out, "truth.json"), "w") as fh:
        json.dump(truth, fh, indent=1)
    return truth


def _p(name: str, sizes: tuple[int, ...], **kw: object) -> Pattern:
    top = max(sizes)
    return replace(Pattern(name, sizes, (2 * top, 4 * top, 8 * top)), **kw)  # type: ignore[arg-type]


PATTERNS: dict[str, Callable[[], Pattern]] = {
    "fsdp": lambda: _p("fsdp", (1, 2, 4, 8), layer_bytes=60e6, fwd=4e-3),
    "multinode": lambda: _p(
        "multinode",
        (1, 2, 4, 8, 16),
        skew=2e-3,
        legacy_names=True,
        net=Net(alpha=6e-6, bandwidth=150e9, inter_alpha=30e-6, inter_bandwidth=25e9, flat=False),
        fwd=6e-3,
    ),
    "tp": lambda: _p("tp", (1, 2, 4, 8), fwd=3e-3, act_bytes=16e6, skew=0.5e-3),
    "grad_accum": lambda: _p("grad_accum", (1, 3, 6), accumulate=4, steps=8, fwd=1.5e-3),
    "heavy_tail": lambda: _p(
        "heavy_tail", (1, 2, 4, 8), tail=2e-3, steps=10, fwd=2e-3, truth_steps=400
    ),
    "launch_bound": lambda: _p(
        "launch_bound",
        (1, 2, 4, 8),
        small_kernels=2000,
        steps=3,
        layers=2,
        fwd=0.5e-3,
        buckets=(4e6,),
        truth_steps=8,
    ),
    "hybrid": lambda: _p(
        "hybrid",
        (2, 4, 8),
        tp_size=2,
        fwd=3e-3,
        act_bytes=4e6,
        buckets=(200e6, 200e6, 100e6),
        net=Net(alpha=20e-6, bandwidth=50e9),
    ),
    "comm_types": lambda: _p(
        "comm_types",
        (1, 2, 4, 8),
        bcast_bytes=4096,
        legacy_names=True,
        buckets=(100e6,),
        net=Net(alpha=5e-6, bcast_alpha=300e-6),
    ),
}
