"""Step pieces shared by every pattern program: a layer's kernels, the optimizer, data loading
and the batch copy, the end of a step, and when DDP's gradient buckets are ready.

Why a module of its own: the plain programs (:mod:`~tracescale.simulate.programs`), the sharded
(:mod:`~tracescale.simulate.sharded`), expert (:mod:`~tracescale.simulate.experts`) and pipeline
(:mod:`~tracescale.simulate.pipeline`) programs all lay out these same pieces; here they depend on
the engine alone, so ``programs`` can dispatch to the others without an import cycle.
"""

from __future__ import annotations

import math

import numpy as np

from tracescale.simulate import kernels as K
from tracescale.simulate.engine import Engine, Times
from tracescale.simulate.spec import PatternSpec


def kernel_share(e: Engine, total: Times, cum: list[float], j: int) -> Times:
    """Kernel j's share of a phase whose GPU time is ``total`` (ns, per rank)."""
    return np.rint(total * cum[j + 1]).astype(np.int64) - np.rint(total * cum[j]).astype(np.int64)


def layer_kernels(e: Engine, spec: tuple[K.KernelSpec, ...], total: Times, layer: int,
                  cum: list[float]) -> None:  # fmt: skip
    """One layer's kernels of a phase whose GPU time is ``total``."""
    per = len(spec)
    for i, (ops, name, _) in enumerate(spec):
        e.kernel(ops, name, kernel_share(e, total, cum, layer * per + i))


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


def bucket_after(buckets: int, comm_start: float, kernels: int) -> list[int]:
    """Per bucket: after how many backward kernels its gradients are ready."""
    out = []
    for b in range(buckets):
        frac = comm_start + (1 - comm_start) * b / max(buckets - 1, 1)
        out.append(min(kernels, max(1, math.ceil(frac * kernels - 1e-9))))
    return out
