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

from tracescale.simulate import checkpointing, cuda_graph, experts, sharded
from tracescale.simulate import kernels as K
from tracescale.simulate.engine import Engine, Times
from tracescale.simulate.events import COMM_STREAM, COMPUTE_STREAM

#: base parallelism (one of them) and modifiers that combine with any base
BASES = ("ddp", "fsdp", "tp", "pp", "moe", "zero2", "hsdp")
MODIFIERS = ("grad_accum", "multinode", "launch_bound", "heavy_tail", "comm_types", "cuda_graph",
             "act_ckpt")  # fmt: skip
#: base -> modifiers it refuses, and why (one line each)
REFUSED: dict[str, dict[str, str]] = {
    "pp": {"cuda_graph": "a graph per stage pass is not modelled",
           "comm_types": "its world Broadcast/AllReduce would cross the pipeline's stages",
           "launch_bound": "~2000 kernels per microbatch pass make traces of gigabytes"},
    "moe": {"cuda_graph": "data-dependent expert loads cannot be captured in one graph"},
    "zero2": {"cuda_graph": "the graph engine has no sharded optimizer step"},
    "hsdp": {"cuda_graph": "the graph engine runs collectives over the world only"},
}  # fmt: skip
PATTERNS = BASES + MODIFIERS
#: what a modifier sets unless the user's --set says otherwise (launch_bound: ~2000 kernels)
PRESETS: dict[str, dict[str, float | int]] = {
    "launch_bound": {"layers": 286, "launch_overhead": 6e-6, "fwd_time": 0.008, "bwd_time": 0.016},
    "multinode": {"inter_bandwidth": 50e9 / 6, "inter_alpha": 30e-6},
    "cuda_graph": {"layers": 64},  # 448 graph nodes: their device gaps are a serial term
    # pp: 2 layers per stage, a microbatch's pass long against its 4 MiB transfer
    "pp": {"layers": 2, "fwd_time": 0.16, "bwd_time": 0.32, "act_bytes": 4_194_304},
}
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
    spec = PatternSpec(bases[0] if bases else "ddp", frozenset(t for t in parts if t in MODIFIERS))
    for modifier in sorted(spec.modifiers):
        why = REFUSED.get(spec.base, {}).get(modifier)
        if why is None and modifier == "cuda_graph" and spec.has("act_ckpt"):
            why = "a recomputed forward inside the graph is not modelled"
        if why:
            raise ValueError(f"--pattern {text!r}: {spec.base} does not combine with {modifier} "
                             f"({why})")  # fmt: skip
    return spec


def _split(e: Engine, total: Times, cum: list[float], j: int) -> Times:
    """Kernel j's share of a phase whose GPU time is ``total`` (ns, per rank)."""
    return np.rint(total * cum[j + 1]).astype(np.int64) - np.rint(total * cum[j]).astype(np.int64)


def layer_kernels(e: Engine, spec: tuple[K.KernelSpec, ...], total: Times, layer: int,
                  cum: list[float]) -> None:  # fmt: skip
    """One layer's kernels of a phase whose GPU time is ``total``."""
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


def optimizer(e: Engine, seconds: float) -> None:
    """``opt_kernels`` multi_tensor_apply kernels of ``seconds`` GPU time in all."""
    total = seconds * 1e9 * e.jitter()
    a = e.h.copy()
    k = e.p.opt_kernels
    for i in range(k):
        dur = np.rint(total * (i + 1) / k).astype(np.int64) - np.rint(total * i / k).astype(
            np.int64
        )
        e.kernel(("aten::_foreach_add_",), K.OPT, dur)
    e.annotate("user_annotation", "Optimizer.step#AdamW.step", a)


def close_step(e: Engine, number: int) -> None:
    """``loss.item()``, the host work after it (sync_stall), the end of ProfilerStep#number."""
    e.item_sync()
    stall = np.rint(e.p.sync_stall * 1e9 * e.jitter()).astype(np.int64)
    e.host("cpu_op", "aten::to", stall, ops=("aten::_to_copy", "aten::add_", "aten::div"))
    e.end_step(number)


def load_batch(e: Engine, spec: PatternSpec) -> None:
    """Data loading (heavy_tail: plus a lognormal delay per rank) and the batch's H2D copy."""
    p = e.p
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


def _replicated(seconds: float) -> float:
    return seconds


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
        e.kernel(ops, name, _split(e, bwd, cum, j))
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


def bucket_after(buckets: int, comm_start: float, kernels: int) -> list[int]:
    """Per bucket: after how many backward kernels its gradients are ready."""
    out = []
    for b in range(buckets):
        frac = comm_start + (1 - comm_start) * b / max(buckets - 1, 1)
        out.append(min(kernels, max(1, math.ceil(frac * kernels - 1e-9))))
    return out
