"""Variants of the independent studies: trace conventions and step structures real jobs differ in.

Each variant is a :class:`~tests.independent.gen.Pattern` of gen.py's patterns with another
:class:`~tests.independent.sched.Style` (how stream waits are recorded, which thread runs
backward, step numbering, fp32 and NCCL >= 2.19 kernel names, FSDP2 collective names, delay and
noise shapes, a second host thread), or another step structure (FSDP with prefetch, Megatron
tensor parallel, sequence parallel). The truth comes from the same scheduler, as for gen.py.

Measured but not asserted in tests/test_independent_variants.py, because they miss:
``heavy_tail/lognormal`` and ``heavy_tail/stalls`` with 10 steps (150 delay draws do not pin
the slowest of 64 ranks down: seeds 1-4 of the lognormal one miss by -28/+7/+32/+38% at 8x,
the truth inside the interval each time; the stalls meet the targets with 30 steps) and
``multinode/unmeasured-tier`` without the inter-node link given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .gen import PATTERNS, Pattern, _p
from .hsdp import hsdp
from .moe import moe_step, zero2_step
from .sched import Net, Style
from .structures import fsdp_prefetch_step, megatron_step


def _styled(base: str, **style: object) -> Callable[[], Pattern]:
    def make() -> Pattern:
        p = PATTERNS[base]()
        return replace(p, style=replace(p.style, **style))  # type: ignore[arg-type]

    return make


def _nodes(gpus_per_node: int) -> Net:
    """The multi-node link: 6x slower across nodes than inside one."""
    return Net(
        alpha=6e-6,
        bandwidth=150e9,
        inter_alpha=30e-6,
        inter_bandwidth=25e9,
        gpus_per_node=gpus_per_node,
        flat=False,
    )


VARIANTS: dict[str, Callable[[], Pattern]] = {
    "fsdp/sync-events": _styled("fsdp", waits="events"),
    "fsdp/no-waits": _styled("fsdp", waits="none"),
    "tp/sync-events": _styled("tp", waits="events"),
    "tp/no-waits": _styled("tp", waits="none"),
    "grad_accum/no-waits": _styled("grad_accum", waits="none"),
    "comm_types/no-waits": _styled("comm_types", waits="none"),
    "fsdp/autograd-thread": _styled("fsdp", bwd_thread=True),
    "grad_accum/autograd-thread": _styled("grad_accum", bwd_thread=True),
    "tp/autograd-thread": _styled("tp", bwd_thread=True),
    "grad_accum/step37": _styled("grad_accum", first_step=37),
    "tp/step37": _styled("tp", first_step=37),
    "fsdp/fp32": _styled("fsdp", fp32=True),
    "comm_types/fp32": _styled("comm_types", fp32=True),
    "fsdp/fsdp2-names": _styled("fsdp", coalesced=True),
    # all of the above at once: a PyTorch >= 2.4 FSDP2 job profiled with cuda_sync events
    "fsdp/prefetch": lambda: _p(
        "fsdp_prefetch",
        (1, 2, 4, 8),
        layer_bytes=60e6,
        fwd=4e-3,
        step_fn=fsdp_prefetch_step,
        extra_pgs=("3",),
    ),
    "fsdp/prefetch-events": lambda: replace(
        VARIANTS["fsdp/prefetch"](), style=Style(waits="events")
    ),
    "tp/megatron": lambda: _p(
        "tp_megatron", (1, 2, 4, 8), fwd=3e-3, act_bytes=16e6, step_fn=megatron_step
    ),
    "tp/megatron-sp": lambda: _p(
        "tp_megatron_sp", (1, 2, 4, 8), fwd=3e-3, act_bytes=16e6, step_fn=megatron_step
    ),
    # 4 GPUs per node measured at 1, 2, 4, 8: the inter-node tier IS measured at 8
    "multinode/4-per-node": lambda: _p(
        "multinode_4pn",
        (1, 2, 4, 8),
        skew=2e-3,
        legacy_names=True,
        fwd=6e-3,
        net=_nodes(4),
    ),
    # 8 GPUs per node measured at 1..8: the tier is never measured (the user supplies it)
    "multinode/unmeasured-tier": lambda: _p(
        "multinode_8pn",
        (1, 2, 4, 8),
        skew=2e-3,
        fwd=6e-3,
        net=_nodes(8),
    ),
    # an optimizer step every 3rd step, 8 measured steps (not a whole number of cycles)
    "grad_accum/every-3rd": lambda: _p(
        "grad_accum_3", (1, 2, 4, 8), accumulate=3, steps=8, fwd=1.5e-3
    ),
    "heavy_tail/lognormal": lambda: replace(
        _p("heavy_tail_ln", (1, 2, 4, 8), tail=1e-3, tail_shape=1.0, steps=10, truth_steps=400),
        style=Style(delay="lognormal"),
    ),
    # 3% of rank-steps stall 25 ms
    "heavy_tail/stalls": lambda: replace(
        _p("heavy_tail_st", (1, 2, 4, 8), tail=25e-3, tail_shape=0.03, steps=10, truth_steps=400),
        style=Style(delay="stall"),
    ),
    # 240 us elementwise kernels (plus a 1.5 us floor): GPU-bound at the measured N, crossing
    # to launch-bound between 2x and 8x; the floor is 5% of their time at N = 8
    "launch_bound/gpu-crossover": lambda: replace(PATTERNS["launch_bound"](), small_gpu=240e-6),
    "tp/lognormal-noise": _styled("tp", noise="lognormal"),
    "launch_bound/no-waits": _styled("launch_bound", waits="none", noise="lognormal"),
    "fsdp/host-thread": _styled("fsdp", host2=True),
    "grad_accum/host-thread": _styled("grad_accum", host2=True, noise="lognormal"),
    # weak scaling (each rank keeps its batch) of tensor-parallel pairs x data parallel: the
    # step does not grow with N; a pair waits at its AllReduces for its partner only
    "hybrid/weak": lambda: replace(PATTERNS["hybrid"](), weak=True),
    "fsdp/fsdp2": _styled(
        "fsdp", waits="events", bwd_thread=True, first_step=37, fp32=True, coalesced=True
    ),
    # expert parallel: all-to-all dispatch and combine around each layer's expert GEMMs, a
    # random expert load per rank and step; ZeRO-2: bucketed ReduceScatter in backward, the
    # sharded optimizer, then the parameters' AllGather (tests/independent/moe.py)
    "moe/expert-parallel": lambda: _p(
        "moe", (1, 2, 4, 8), fwd=3e-3, act_bytes=16e6, step_fn=moe_step, extra_pgs=("1",)
    ),
    "moe/no-waits": lambda: replace(VARIANTS["moe/expert-parallel"](), style=Style(waits="none")),
    "zero2/host-waits": lambda: _p("zero2", (1, 2, 4, 8), fwd=3e-3, step_fn=zero2_step),
    "zero2/no-waits": lambda: replace(VARIANTS["zero2/host-waits"](), style=Style(waits="none")),
    # HSDP: FSDP inside each node, data parallel across nodes (tests/independent/hsdp.py); the
    # shard group grows 2, 4, 8, 8 and the replicate group appears at N = 16 only
    "hsdp/8-per-node": lambda: hsdp(8),
    # 4 GPUs per node: the replicate group is measured at N = 8 and 16
    "hsdp/4-per-node": lambda: hsdp(4),
}

__all__ = ["VARIANTS", "Style"]
