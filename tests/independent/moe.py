"""Step structures of mixture-of-experts expert parallelism and ZeRO-2, on gen.py's primitives.

Why their own file: both put a collective on the compute stream's critical path whose wait a
trace may not record (``Style(waits="none")``): the expert GEMMs wait for the all-to-all that
dispatched their tokens, the next layer for the combine; ZeRO-2's next forward for the
parameters' AllGather after the sharded optimizer. The truth still comes from the schedule.
"""

from __future__ import annotations

import numpy as np

from .gen import COMM, COMM2, COMPUTE, Pattern, _coll, _dp_allreduce, shards, step_begin
from .names import ADAM, GEMM_BIG, GEMM_SMALL
from .sched import Sched

#: NCCL runs an all-to-all as grouped point-to-point sends and receives: one SendRecv kernel.
SEND_RECV = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
#: How long after the awaited event a held stream resumes (the GPU's wait resolution).
WAIT_RESUME = 2.5e-6
#: Coefficient of variation of a rank's expert load (tokens routed to its experts) per step.
IMBALANCE_CV = 0.15


def _all_to_all(s: Sched, p: Pattern, nbytes: float) -> None:
    """An all-to-all of the expert group (every rank, process group "1", its own NCCL stream)
    after the compute stream's work so far; the compute stream then waits for it."""
    n = s.n
    nel = int(nbytes // 2)
    args = {"Collective name": "all_to_all", "In msg nelems": nel, "Out msg nelems": nel,
            "Group size": n, "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]",
            "Process Group Name": "1", "Process Group Description": "tp_group",
            "Process Group Ranks": ("block", n)}  # fmt: skip
    s.collective(COMM2, COMPUTE, "alltoall", nbytes, n, p.net, SEND_RECV, args,
                 "c10d::alltoall_base_", "nccl:all_to_all")  # fmt: skip
    _wait(s, COMM2)


def _wait(s: Sched, producer: int) -> None:
    """The compute stream waits for ``producer``'s work so far; where that held it, it resumes
    ``WAIT_RESUME`` after the awaited end, as a GPU does."""
    before = s.stream(COMPUTE).copy()
    s.wait_stream(COMPUTE, producer)
    held = s.free[COMPUTE] > before
    s.free[COMPUTE] = np.where(held, s.free[COMPUTE] + WAIT_RESUME, s.free[COMPUTE])


def _splits(s: Sched, p: Pattern) -> None:
    """The router's token counts per expert exchanged (a tiny all-to-all) and read on the host
    (``.tolist()``: a sync), as Megatron's all-to-all token dispatcher does before each
    dispatch: the host then launches the dispatch and the expert GEMMs just before the
    dispatch ends, so the GEMMs' launch lag alone does not show that they waited for it."""
    _kernel(s, p, 0.02 * p.fwd / shards(p, s.n), "aten::topk")
    _all_to_all(s, p, 8.0 * s.n)
    a = s.op_begin()
    s.sync(COMPUTE)
    s.op_end(a, "aten::_local_scalar_dense")


#: Host time of the token permutation between the dispatch's launch and the expert GEMMs'
#: (index bookkeeping in Python: it does not shrink with N).
PERMUTE_HOST = 40e-6


def _permute(s: Sched) -> None:
    """The host sorts the received tokens by local expert before launching the expert GEMMs:
    their launch then comes shortly before the dispatch ends, or after it."""
    a = s.op_begin()
    s.host(PERMUTE_HOST)
    s.op_end(a, "moe::sort_chunks_by_idxs")


def _kernel(s: Sched, p: Pattern, t: float | np.ndarray, op: str) -> None:
    """One host op launching one GEMM of ``t`` seconds per rank (plus the per-kernel floor)."""
    mean = float(np.mean(t))
    name = GEMM_BIG if mean >= 200e-6 else GEMM_SMALL
    a = s.op_begin()
    corr = s.runtime("cudaLaunchKernel", s.launch)
    start = np.maximum(s.stream(COMPUTE), s.h)
    end = start + s.jit(1.0) * (np.asarray(t) + p.floor)
    s.free[COMPUTE] = end
    s.rec("kernel", name, str(COMPUTE), start, end, correlation=corr, stream=COMPUTE, device=0)
    s.op_end(a, op)


def _load(s: Sched) -> np.ndarray:
    """Each rank's expert load this step (mean 1); at infinite N there is no imbalance."""
    if s.free_transfers or s.noise <= 0:
        return np.ones(s.n)
    k = 1.0 / IMBALANCE_CV**2
    return s.rng.gamma(k, 1.0 / k, s.n)


def moe_step(s: Sched, p: Pattern, k: int) -> None:
    """Expert parallelism with data-parallel replicas of the dense part: per layer attention
    (a GEMM), the all-to-all dispatch of the tokens, the expert GEMMs (each rank's share of
    the tokens times its load this step), the all-to-all combine; backward the same in reverse
    with the dense gradients' AllReduce per bucket on the default group's stream."""
    g = shards(p, s.n)
    load = _load(s)
    tokens = p.act_bytes / g
    step_begin(s, p)
    for _ in range(p.layers):
        _kernel(s, p, 0.4 * p.fwd / g, "aten::linear")
        _splits(s, p)
        _all_to_all(s, p, tokens)
        _permute(s)
        _kernel(s, p, 0.6 * p.fwd / g * load, "aten::bmm")
        _all_to_all(s, p, tokens)
    remaining = list(p.buckets)
    per_bucket = max(1, p.layers // max(1, len(p.buckets)))
    bwd = "autograd::engine::evaluate_function: "
    for i in range(p.layers):
        _splits(s, p)
        _all_to_all(s, p, tokens)  # the combine's backward
        _permute(s)
        _kernel(s, p, 1.2 * p.fwd / g * load, bwd + "BmmBackward0")
        _all_to_all(s, p, tokens)  # the dispatch's backward
        _kernel(s, p, 0.8 * p.fwd / g, bwd + "AddmmBackward0")
        if s.n > 1 and remaining and (i + 1) % per_bucket == 0:
            _dp_allreduce(s, p, remaining.pop(0), 0, s.n)
    if s.n > 1:
        for b in remaining:
            _dp_allreduce(s, p, b, 0, s.n)
    _end(s, p, p.optimizer, gather=False)


def zero2_step(s: Sched, p: Pattern, k: int) -> None:
    """ZeRO-2: forward on the replicated parameters; backward ReduceScatters each bucket of
    gradients on the NCCL stream, overlapping the next layers' backward; the optimizer updates
    this rank's shard (1/N of it), then an AllGather of the parameters the next forward reads."""
    g = shards(p, s.n)
    step_begin(s, p)
    for _ in range(p.layers):
        _kernel(s, p, p.fwd / g, "aten::linear")
    remaining = list(p.buckets)
    per_bucket = max(1, p.layers // max(1, len(p.buckets)))
    for i in range(p.layers):
        _kernel(s, p, 2 * p.fwd / g, "autograd::engine::evaluate_function: AddmmBackward0")
        if s.n > 1 and remaining and (i + 1) % per_bucket == 0:
            _coll(s, p, "reduce_scatter", remaining.pop(0), COMM, COMPUTE, "0",
                  "reduce_scatter_tensor")  # fmt: skip
    if s.n > 1:
        for b in remaining:
            _coll(s, p, "reduce_scatter", b, COMM, COMPUTE, "0", "reduce_scatter_tensor")
    _end(s, p, p.optimizer / (np.inf if p.infinite else s.n), gather=s.n > 1)


def _end(s: Sched, p: Pattern, opt: float, gather: bool) -> None:
    """The compute stream joins the NCCL streams, the optimizer (``opt`` s), ZeRO's AllGather
    of the updated parameters (waited for), and ``loss.item()``."""
    a = s.op_begin()
    _wait(s, COMM)
    s.op_end(a, "torch.distributed.ddp.reducer::finalize_backward")
    a = s.op_begin()
    s.kernel(COMPUTE, ADAM, opt, device=0)
    s.op_end(a, "Optimizer.step#AdamW.step", "user_annotation")
    if gather:
        _coll(s, p, "allgather", sum(p.buckets), COMM, COMPUTE, "0", "all_gather_into_tensor")
        a = s.op_begin()
        _wait(s, COMM)
        s.op_end(a, "zero::wait_parameters")
    a = s.op_begin()
    b = s.op_begin()
    s.kernel(COMPUTE, "Memcpy DtoH (Device -> Pageable)", 3e-6, cat="gpu_memcpy")
    s.sync(COMPUTE)
    s.op_end(b, "aten::_local_scalar_dense")
    s.op_end(a, "aten::item")
