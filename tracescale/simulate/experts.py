"""The ``moe`` pattern: expert parallelism, each layer's tokens dispatched to their experts and
combined back by all-to-all over the world, with the expert load drawn per step and rank.

Why the load is drawn: a router does not split tokens evenly, so in each layer the rank with
the busiest experts finishes its expert GEMMs last, and every other rank waits for it in the
combine all-to-all (whose transfer starts when the last rank arrived). That wait is the
imbalance; the truth reports it as the step with the drawn loads minus the same step with
balanced loads.

Per layer (forward): the dense part (the layer's kernels, ``fwd_time``), a dispatch
all-to-all, the expert GEMM (``expert_time / layers`` x the rank's load), a combine
all-to-all; the compute stream waits for each all-to-all. Backward runs the mirror (combine's
gradient, experts x2, dispatch's gradient, the dense backward) and DDP's bucketed AllReduce of
the dense gradients. The all-to-all is ``record_param_comms`` ``all_to_all`` and a NCCL
``SendRecv`` kernel (NCCL runs it as grouped point-to-point), costing
``(N-1) alpha + (N-1)/N a2a_bytes / bandwidth`` with one rank's buffer ``a2a_bytes`` (/N in
strong mode: the rank's share of the tokens). Loads: ``exp(imbalance z)`` per step and rank,
normalized to mean 1 over the ranks (the tokens are the same, only their split varies).
"""

from __future__ import annotations

import numpy as np

from tracescale.simulate import checkpointing, layers
from tracescale.simulate import kernels as K
from tracescale.simulate.engine import Engine, Times
from tracescale.simulate.events import COMM_STREAM, COMPUTE_STREAM
from tracescale.simulate.spec import PatternSpec

EXPERT_GEMM = (
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_grouped_128x128_16x4_nn_align4>"
    "(cutlass_80_tensorop_s1688gemm_grouped_128x128_16x4_nn_align4::Params)"
)
EXPERT_OPS = ("MoELayer.experts", "aten::bmm")
EXPERT_BWD_OPS = ("autograd::engine::evaluate_function: BmmBackward0", "BmmBackward0", "aten::bmm")
WAIT_OP = "c10d::wait"


def draw_loads(e: Engine) -> np.ndarray:
    """Per (replica, rank): this step's expert load factor, mean 1 over the ranks.

    Drawn even when ``imbalance`` is 0, so a balanced rerun consumes the same random stream."""
    z = e.rng.standard_normal(e.h.shape)
    w = np.exp(e.p.imbalance * z)
    loads: np.ndarray = w / w.mean(axis=1, keepdims=True)
    return loads


def _all_to_all(e: Engine) -> None:
    """One token exchange over the world; the compute stream then waits for it."""
    if e.n < 2:
        return
    nbytes = max(4, round(e.parallel(float(e.p.a2a_bytes))))
    nel = nbytes // 4
    e.collective("alltoall", nel, nel, 4 * nel, after=COMPUTE_STREAM)
    e.wait_for(COMPUTE_STREAM, COMM_STREAM, WAIT_OP)


def _experts(e: Engine, loads: np.ndarray, factor: float, ops: tuple[str, ...]) -> None:
    seconds = e.parallel(e.p.expert_time) * factor / e.p.layers
    dur = np.rint(seconds * 1e9 * loads * e.jitter()).astype(np.int64)
    e.kernel(ops, EXPERT_GEMM, dur)


def forward(e: Engine, fwd: Times, loads: np.ndarray) -> None:
    """Every layer: dense kernels, dispatch, experts, combine."""
    cum = K.cumulative(K.FWD_LAYER, e.p.layers)
    for layer in range(e.p.layers):
        layers.layer_kernels(e, K.FWD_LAYER, fwd, layer, cum)
        _all_to_all(e)
        _experts(e, loads, 1.0, EXPERT_OPS)
        _all_to_all(e)


def backward(
    e: Engine,
    spec: PatternSpec,
    bwd: Times,
    fwd: Times,
    loads: np.ndarray,
    reduces: bool,
) -> None:
    """Every layer in reverse: combine's gradient, experts' backward, dispatch's gradient, the
    dense backward; under ``act_ckpt`` the layer's dense forward runs again first, in a
    checkpoint node of its own (no collective is launched inside it). DDP buckets of the dense
    gradients as their layers finish."""
    p = e.p
    cum = K.cumulative(K.BWD_LAYER, p.layers)
    fwd_cum = K.cumulative(K.FWD_LAYER, p.layers)
    per = len(K.BWD_LAYER)
    after = layers.bucket_after(p.buckets, p.comm_start, per * p.layers)
    total = int(p.model_bytes) // 4
    nelems = [total // p.buckets + (1 if b < total % p.buckets else 0) for b in range(p.buckets)]
    bucket = 0
    for k, layer in enumerate(reversed(range(p.layers))):
        if spec.has("act_ckpt"):  # the dense forward again; the token exchange is not redone
            checkpointing.close_region(e, checkpointing.open_region(e, fwd, layer, fwd_cum))
        _all_to_all(e)
        _experts(e, loads, 2.0, EXPERT_BWD_OPS)
        _all_to_all(e)
        layers.layer_kernels(e, K.BWD_LAYER, bwd, k, cum)
        while reduces and bucket < p.buckets and after[bucket] <= per * (k + 1):
            nel = nelems[bucket]
            e.collective("allreduce", nel, nel, 4 * nel, after=COMPUTE_STREAM)
            bucket += 1
