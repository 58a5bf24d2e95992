"""The training-step programs of the pattern simulator: a pattern spec in, engine calls out.

One function lays out one ProfilerStep of every rank with :class:`~tracescale.simulate.engine.
Engine` calls, in the order the host issues them in PyTorch: data loading, the batch copy,
forward and backward layer by layer with the collectives of the parallelism (DDP buckets,
FSDP per-layer AllGather/ReduceScatter with prefetch, tensor-parallel AllReduce of
activations), the optimizer and ``loss.item()``. What each pattern changes is documented in
``tracescale simulate --help`` and docs/DESIGN.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tracescale.simulate import cuda_graph
from tracescale.simulate import kernels as K
from tracescale.simulate.engine import Engine, Times
from tracescale.simulate.events import COMM_STREAM, COMPUTE_STREAM

#: base parallelism (one of them) and modifiers that combine with any base
BASES = ("ddp", "fsdp", "tp")
MODIFIERS = ("grad_accum", "multinode", "launch_bound", "heavy_tail", "comm_types", "cuda_graph")
PATTERNS = BASES + MODIFIERS
#: what a modifier sets unless the user's --set says otherwise (launch_bound: ~2000 kernels)
PRESETS: dict[str, dict[str, float | int]] = {
    "launch_bound": {"layers": 286, "launch_overhead": 6e-6, "fwd_time": 0.008, "bwd_time": 0.016},
    "multinode": {"inter_bandwidth": 50e9 / 6, "inter_alpha": 30e-6},
    "cuda_graph": {"layers": 64},  # 448 graph nodes: their device gaps are a serial term
}
FSDP_PRE_FORWARD = "FullyShardedDataParallel._pre_forward"
FSDP_PRE_BACKWARD = "FullyShardedDataParallel._pre_backward_hook"
#: the host op in which the compute stream waits for the step's last collective
WAIT_OPS = {
    "ddp": "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
    "fsdp": "FullyShardedDataParallel._post_backward_final_callback",
    "tp": "_c10d_functional::wait_tensor",
}
FORWARD_NAMES = {
    "ddp": "DistributedDataParallel.forward",
    "fsdp": "FullyShardedDataParallel.forward",
    "tp": "TensorParallelModel.forward",
}


@dataclass(frozen=True)
class PatternSpec:
    """A base parallelism plus modifiers, e.g. ``fsdp`` or ``ddp+heavy_tail+multinode``."""

    base: str
    modifiers: frozenset[str]

    @property
    def name(self) -> str:
        return "+".join([self.base, *sorted(self.modifiers)])

    def has(self, modifier: str) -> bool:
        return modifier in self.modifiers

    def cycle(self, accum_steps: int) -> int:
        """ProfilerSteps after which every rank is back in step (one optimizer step)."""
        return accum_steps if self.has("grad_accum") else 1


def parse_pattern(text: str) -> PatternSpec:
    """``fsdp``, ``heavy_tail``, ``fsdp,multinode`` ... (a modifier alone means DDP + it)."""
    parts = [t.strip().lower() for t in text.replace("+", ",").split(",") if t.strip()]
    bases = [t for t in parts if t in BASES]
    unknown = [t for t in parts if t not in PATTERNS]
    if unknown or len(bases) > 1 or not parts:
        raise ValueError(
            f"--pattern {text!r}: expected one of {', '.join(BASES)} and any of "
            f"{', '.join(MODIFIERS)} joined by ',' (e.g. fsdp,multinode)"
        )
    return PatternSpec(bases[0] if bases else "ddp", frozenset(t for t in parts if t in MODIFIERS))


def _split(e: Engine, total: Times, cum: list[float], j: int) -> Times:
    """Kernel j's share of a phase whose GPU time is ``total`` (ns, per rank)."""
    return np.rint(total * cum[j + 1]).astype(np.int64) - np.rint(total * cum[j]).astype(np.int64)


def _layer_kernels(e: Engine, spec: tuple[K.KernelSpec, ...], total: Times, layer: int,
                   cum: list[float]) -> None:  # fmt: skip
    per = len(spec)
    for i, (ops, name, _) in enumerate(spec):
        e.kernel(ops, name, _split(e, total, cum, layer * per + i))


def step(e: Engine, spec: PatternSpec, index: int, first_step: int) -> None:
    """One ProfilerStep of every rank."""
    p = e.p
    dist = e.n > 1
    accum = p.accum_steps if spec.has("grad_accum") else 1
    sync_step = index % accum == accum - 1
    e.begin_step()
    # Tensor parallelism splits the model, not the batch: every rank loads and copies it all.
    shard_input = e.parallel if spec.base != "tp" else _replicated
    dl = (p.dl_serial + shard_input(p.dl_parallel)) * 1e9 * e.jitter()
    if spec.has("heavy_tail") and p.tail_median > 0:
        dl = dl + p.tail_median * 1e9 * np.exp(p.tail_sigma * e.rng.standard_normal(e.h.shape))
    e.host("user_annotation", K.DATALOADER, np.rint(dl).astype(np.int64), label="dataloader",
           ops=("aten::empty", "aten::stack"))  # fmt: skip
    h2d = np.rint(shard_input(p.h2d_time) * 1e9 * e.jitter()).astype(np.int64)
    nbytes = round(p.h2d_bytes * shard_input(1.0))
    e.kernel(("aten::to", "aten::_to_copy", "aten::copy_"), K.H2D, h2d, cat="gpu_memcpy",
             bytes=nbytes)  # fmt: skip
    if dist and spec.has("comm_types"):
        # DDP broadcasts module buffers from rank 0 before each forward; forward waits for it.
        nel = p.bcast_bytes // 4
        e.collective("broadcast", nel, nel, p.bcast_bytes, after=COMPUTE_STREAM)
        e.wait_for(COMPUTE_STREAM, COMM_STREAM, "c10d::wait")
    fwd = e.parallel(p.fwd_time) * 1e9 * e.jitter()
    bwd = e.parallel(p.bwd_time) * 1e9 * e.jitter()
    if spec.has("cuda_graph"):  # forward, backward and their collectives: one graph launch
        cuda_graph.begin(e)
    a = e.h.copy()
    if spec.base == "fsdp":
        _fsdp_forward(e, fwd, dist)
    else:
        cum = K.cumulative(K.FWD_LAYER, p.layers)
        for layer in range(p.layers):
            _layer_kernels(e, K.FWD_LAYER, fwd, layer, cum)
            if dist and spec.base == "tp":
                _tp_allreduce(e)
    e.annotate("user_annotation", FORWARD_NAMES[spec.base], a)
    communicated = dist and (spec.base != "ddp" or sync_step)
    if spec.base == "fsdp":
        _fsdp_backward(e, bwd, dist, sync_step)
    else:
        _backward(e, spec, bwd, dist and spec.base == "ddp" and sync_step)
    if dist and spec.has("comm_types"):
        # the loss averaged for logging: one element, a tree with the LL protocol
        e.collective("allreduce", 1, 1, 4, after=COMPUTE_STREAM)
    if communicated or (dist and spec.has("comm_types")):
        e.wait_for(COMPUTE_STREAM, COMM_STREAM, WAIT_OPS[spec.base])
    cuda_graph.end(e)
    if sync_step:
        sharded = spec.base in ("fsdp", "tp")
        total = (e.parallel(p.opt_time) if sharded else p.opt_time) * 1e9 * e.jitter()
        a = e.h.copy()
        k = p.opt_kernels
        for i in range(k):
            dur = np.rint(total * (i + 1) / k).astype(np.int64) - np.rint(total * i / k).astype(
                np.int64
            )
            e.kernel(("aten::_foreach_add_",), K.OPT, dur)
        e.annotate("user_annotation", "Optimizer.step#AdamW.step", a)
    e.item_sync()
    stall = np.rint(p.sync_stall * 1e9 * e.jitter()).astype(np.int64)
    e.host("cpu_op", "aten::to", stall, ops=("aten::_to_copy", "aten::add_", "aten::div"))
    e.end_step(first_step + index)


def _replicated(seconds: float) -> float:
    return seconds


def _tp_allreduce(e: Engine) -> None:
    """Row-parallel layer output: AllReduce of the activations; the next layer waits for it."""
    nel = e.p.act_bytes // 4
    e.collective("allreduce", nel, nel, e.p.act_bytes, after=COMPUTE_STREAM)
    e.wait_for(COMPUTE_STREAM, COMM_STREAM, "_c10d_functional::wait_tensor")


def _backward(e: Engine, spec: PatternSpec, bwd: Times, buckets_on: bool) -> None:
    """Backward layer by layer (reverse); DDP buckets ready after ``comm_start`` of it."""
    p = e.p
    cum = K.cumulative(K.BWD_LAYER, p.layers)
    per = len(K.BWD_LAYER)
    kb = per * p.layers
    after = []
    for b in range(p.buckets):
        frac = p.comm_start + (1 - p.comm_start) * b / max(p.buckets - 1, 1)
        after.append(min(kb, max(1, math.ceil(frac * kb - 1e-9))))
    total = int(p.model_bytes) // 4
    nelems = [total // p.buckets + (1 if b < total % p.buckets else 0) for b in range(p.buckets)]
    bucket = 0
    for j in range(kb):
        ops, name, _ = K.BWD_LAYER[j % per]
        e.kernel(ops, name, _split(e, bwd, cum, j))
        if spec.base == "tp" and e.n > 1 and j % per == per - 1:
            _tp_allreduce(e)  # column-parallel input gradient
        while buckets_on and bucket < p.buckets and after[bucket] == j + 1:
            nel = nelems[bucket]
            e.collective("allreduce", nel, nel, 4 * nel, after=COMPUTE_STREAM)
            bucket += 1


def _shards(e: Engine) -> tuple[int, int]:
    """(full, shard) element counts of one layer's parameters (shard = full / N)."""
    full = int(e.p.model_bytes) // 4 // e.p.layers
    full -= full % e.n
    return full, full // e.n


def _all_gather(e: Engine) -> tuple[Times, int]:
    """Unshard one layer (FSDP issues it from its own stream: no wait on compute)."""
    full, shard = _shards(e)
    return e.collective("allgather", shard, full, 4 * full, record=True)


def _fsdp_forward(e: Engine, fwd: Times, dist: bool) -> None:
    """Per layer: compute waits for its AllGather; the next layer's AllGather is prefetched."""
    p = e.p
    cum = K.cumulative(K.FWD_LAYER, p.layers)
    gathered = _all_gather(e) if dist else None
    for layer in range(p.layers):
        if gathered is not None:
            e.wait_for(COMPUTE_STREAM, COMM_STREAM, FSDP_PRE_FORWARD, gathered)
            gathered = _all_gather(e) if layer + 1 < p.layers else None
        _layer_kernels(e, K.FWD_LAYER, fwd, layer, cum)


def _fsdp_backward(e: Engine, bwd: Times, dist: bool, reduce: bool) -> None:
    """Reverse order: re-gather (prefetch one ahead), compute, ReduceScatter the gradients.

    Under gradient accumulation (``no_sync``) only the optimizer's step reduces.
    """
    p = e.p
    cum = K.cumulative(K.BWD_LAYER, p.layers)
    gathered = _all_gather(e) if dist else None
    full, shard = _shards(e)
    for k, layer in enumerate(reversed(range(p.layers))):
        if gathered is not None:
            e.wait_for(COMPUTE_STREAM, COMM_STREAM, FSDP_PRE_BACKWARD, gathered)
            gathered = _all_gather(e) if layer > 0 else None
        _layer_kernels(e, K.BWD_LAYER, bwd, k, cum)
        if dist and reduce:
            e.collective("reduce_scatter", full, shard, 4 * full, after=COMPUTE_STREAM)
