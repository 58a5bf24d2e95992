"""The training-step programs of the pattern simulator: a pattern spec in, engine calls out.

One function lays out one ProfilerStep of every rank with :class:`~tracescale.simulate.engine.
Engine` calls, in the order the host issues them in PyTorch: data loading, the batch copy,
forward and backward layer by layer with the collectives of the parallelism (DDP buckets,
FSDP per-layer AllGather/ReduceScatter with prefetch, tensor-parallel AllReduce of
activations), the optimizer and ``loss.item()``. What each pattern changes is documented in
``tracescale simulate --help`` and docs/DESIGN.md. The pieces every program shares (a layer's
kernels, the optimizer, data loading, the end of a step) are in :mod:`~tracescale.simulate.
layers`; the pattern spec is in :mod:`~tracescale.simulate.spec`.
"""

from __future__ import annotations

from tracescale.simulate import checkpointing, cuda_graph, experts, sharded
from tracescale.simulate import kernels as K
from tracescale.simulate.engine import Engine, Times
from tracescale.simulate.events import COMM_STREAM, COMPUTE_STREAM
from tracescale.simulate.layers import (
    bucket_after,
    close_step,
    kernel_share,
    layer_kernels,
    load_batch,
    optimizer,
)
from tracescale.simulate.spec import PatternSpec

#: the host op in which the compute stream waits for the step's last collective
WAIT_OPS = {
    "ddp": "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
    "fsdp": "FullyShardedDataParallel._post_backward_final_callback",
    "tp": "_c10d_functional::wait_tensor",
    "zero2": "DeepSpeedZeroOptimizer.reduce_ipg_grads",
    "hsdp": "FullyShardedDataParallel._post_backward_final_callback",
    "moe": "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
}
FORWARD_NAMES = {
    "ddp": "DistributedDataParallel.forward",
    "fsdp": "FullyShardedDataParallel.forward",
    "tp": "TensorParallelModel.forward",
    "zero2": "DeepSpeedEngine.forward",
    "hsdp": "FullyShardedDataParallel.forward",
    "moe": "MoETransformer.forward",
}


def step(e: Engine, spec: PatternSpec, index: int, first_step: int) -> None:
    """One ProfilerStep of every rank."""
    p = e.p
    dist = e.n > 1
    accum = p.accum_steps if spec.has("grad_accum") else 1
    sync_step = index % accum == accum - 1
    e.begin_step()
    load_batch(e, spec)
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
    loads = experts.draw_loads(e) if spec.base == "moe" else None
    if spec.base in ("fsdp", "hsdp"):
        sharded.fsdp_forward(e, spec, fwd, dist)
    elif loads is not None:
        experts.forward(e, fwd, loads)
    else:
        cum = K.cumulative(K.FWD_LAYER, p.layers)
        for layer in range(p.layers):
            layer_kernels(e, K.FWD_LAYER, fwd, layer, cum)
            if dist and spec.base == "tp":
                _tp_allreduce(e)
    e.annotate("user_annotation", FORWARD_NAMES[spec.base], a)
    reduces = dist and sync_step
    communicated = dist and (spec.base not in ("ddp", "zero2", "moe") or sync_step)
    if spec.base in ("fsdp", "hsdp"):
        sharded.fsdp_backward(e, spec, bwd, fwd, dist, sync_step)
    elif loads is not None:
        experts.backward(e, spec, bwd, fwd, loads, reduces)
    else:
        _backward(e, spec, bwd, fwd, reduces and spec.base in ("ddp", "zero2"))
    if dist and spec.has("comm_types"):
        # the loss averaged for logging: one element, a tree with the LL protocol
        e.collective("allreduce", 1, 1, 4, after=COMPUTE_STREAM)
    if communicated or (dist and spec.has("comm_types")):
        e.wait_for(COMPUTE_STREAM, COMM_STREAM, WAIT_OPS[spec.base])
    cuda_graph.end(e)
    if sync_step:
        if spec.base == "zero2":
            sharded.zero2_step(e, dist)
        elif spec.base == "hsdp":
            optimizer(e, p.opt_time / sharded.shard_size(p, e.n))
        else:
            split = spec.base in ("fsdp", "tp")
            optimizer(e, e.parallel(p.opt_time) if split else p.opt_time)
    close_step(e, first_step + index)


def _tp_allreduce(e: Engine) -> None:
    """Row-parallel layer output: AllReduce of the activations; the next layer waits for it."""
    nel = e.p.act_bytes // 4
    e.collective("allreduce", nel, nel, e.p.act_bytes, after=COMPUTE_STREAM)
    e.wait_for(COMPUTE_STREAM, COMM_STREAM, "_c10d_functional::wait_tensor")


def _backward(e: Engine, spec: PatternSpec, bwd: Times, fwd: Times, buckets_on: bool) -> None:
    """Backward layer by layer (reverse); DDP buckets ready after ``comm_start`` of it
    (zero2: each bucket ReduceScattered instead of AllReduced). Under ``act_ckpt`` each layer's
    forward runs again first, and a bucket ready inside a layer waits for the layer's end."""
    p = e.p
    cum = K.cumulative(K.BWD_LAYER, p.layers)
    fwd_cum = K.cumulative(K.FWD_LAYER, p.layers)
    per = len(K.BWD_LAYER)
    kb = per * p.layers
    after = bucket_after(p.buckets, p.comm_start, kb)
    total = int(p.model_bytes) // 4
    nelems = [total // p.buckets + (1 if b < total % p.buckets else 0) for b in range(p.buckets)]
    ckpt = spec.has("act_ckpt")
    bucket = 0
    region = None
    for j in range(kb):
        if ckpt and j % per == 0:
            region = checkpointing.open_region(e, fwd, p.layers - 1 - j // per, fwd_cum)
        ops, name, _ = K.BWD_LAYER[j % per]
        e.kernel(ops, name, kernel_share(e, bwd, cum, j))
        if region is not None and j % per == per - 1:
            checkpointing.close_region(e, region)
            region = None
        if spec.base == "tp" and e.n > 1 and j % per == per - 1:
            _tp_allreduce(e)  # column-parallel input gradient
        while buckets_on and bucket < p.buckets and after[bucket] <= j + 1 and region is None:
            _reduce_bucket(e, spec, nelems[bucket])
            bucket += 1


def _reduce_bucket(e: Engine, spec: PatternSpec, nel: int) -> None:
    """DDP's AllReduce of one gradient bucket; ZeRO-2 ReduceScatters it (each rank keeps the
    1/N shard of the gradients its optimizer updates)."""
    if spec.base == "zero2":
        full = nel - nel % e.n
        e.collective("reduce_scatter", full, full // e.n, 4 * full, after=COMPUTE_STREAM)
    else:
        e.collective("allreduce", nel, nel, 4 * nel, after=COMPUTE_STREAM)
