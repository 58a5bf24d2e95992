"""Step structures the base patterns lack: FSDP with prefetch, Megatron tensor parallel and
sequence parallel. Each is a ``Pattern.step_fn`` on gen.py's primitives (same data loading,
input copy, optimizer and ``loss.item()``), so the truth still comes from the schedule.
"""

from __future__ import annotations

from .gen import (
    COMM,
    COMM2,
    COMPUTE,
    GELU,
    GEMM_BIG,
    GEMM_SMALL,
    Pattern,
    _coll,
    sharded,
    shards,
    step_begin,
    step_end,
)
from .sched import Sched

COMM_RS = 63  # NCCL stream of the reduce-scatter process group
FLASH_FWD = (
    "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat"
    "16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, false, false, fal"
    "se, true, true, false>(Flash_fwd_params)"
)
FLASH_BWD = (
    "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, "
    "2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::"
    "bfloat16_t> >, false, false, false, false, false, false, false>(Flash_bwd_params)"
)
LAYER_NORM = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
    "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, "
    "float*, c10::BFloat16*)"
)


def _op(s: Sched, p: Pattern, name: str, t: float, op: str) -> None:
    """One host op launching one kernel of ``t`` seconds (plus the per-kernel floor)."""
    a = s.op_begin()
    if name == "gemm":
        name = GEMM_BIG if t >= 200e-6 else GEMM_SMALL
    s.kernel(COMPUTE, name, t + p.floor, device=0)
    s.op_end(a, op)


def fsdp_prefetch_step(s: Sched, p: Pattern, k: int) -> None:
    """FSDP with forward and backward prefetch: layer l+1's AllGather is issued before layer
    l's compute (which waits only for its own AllGather, by event); each ReduceScatter runs on
    its own process group's stream, after the layer's gradient, overlapping the next layer's
    backward; the optimizer (sharded) waits for both NCCL streams."""
    n, g = s.n, shards(p, s.n)

    def gather(layer: int, after: int | None, cname: str) -> tuple[object, ...]:
        _coll(s, p, "allgather", p.layer_bytes, COMM, after, "0", cname)
        return s.record_event(COMM)

    step_begin(s, p)
    ready = gather(0, COMPUTE, "all_gather_into_tensor")
    for layer in range(p.layers):  # forward
        nxt = gather(layer + 1, None, "all_gather_into_tensor") if layer + 1 < p.layers else None
        s.wait_event(COMPUTE, ready)  # type: ignore[arg-type]
        _op(s, p, "gemm", p.fwd / g, "aten::linear")
        _op(s, p, GELU, 0.15 * p.fwd / g, "aten::gelu")
        ready = nxt if nxt is not None else ready
    s.thread = 1 if s.style.bwd_thread else 0
    ready = gather(p.layers - 1, None, "_allgather_base")
    for i in range(p.layers - 1, -1, -1):  # backward, last layer first
        nxt = gather(i - 1, None, "_allgather_base") if i > 0 else None
        s.wait_event(COMPUTE, ready)  # type: ignore[arg-type]
        _op(s, p, "gemm", 2 * p.fwd / g, "autograd::engine::evaluate_function: AddmmBackward0")
        if n > 1:
            _coll(s, p, "reduce_scatter", p.layer_bytes, COMM_RS, COMPUTE, "3",
                  "reduce_scatter_tensor")  # fmt: skip
        ready = nxt if nxt is not None else ready
    if s.thread:
        s.thread = 0
        s.host(8e-6)
    if n > 1:
        s.wait_stream(COMPUTE, COMM_RS)
    step_end(s, p, True, True, p.optimizer / sharded(p, n))


def _tp_comm(s: Sched, p: Pattern, coll: str, cname: str) -> None:
    """A tensor-parallel collective of the activations on the critical path: the NCCL stream
    waits for the compute stream, and the compute stream for its result."""
    if s.n > 1:
        _coll(s, p, coll, p.act_bytes, COMM2, COMPUTE, "1", cname)
        s.wait_stream(COMPUTE, COMM2)


def megatron_step(s: Sched, p: Pattern, k: int) -> None:
    """Megatron-LM tensor parallel over every rank: per layer, attention (column-parallel QKV,
    flash attention, row-parallel projection) and MLP (column fc1, GeLU, row fc2). Plain TP
    AllReduces the activations after each row-parallel GEMM in forward and the input gradients
    of each column-parallel block in backward (two per layer each way); sequence parallel
    (``p.name`` ending in "sp") AllGathers before each column-parallel block and
    ReduceScatters after each row-parallel one instead (their backward the reverse), and its
    LayerNorms work on 1/N of the sequence. Each rank holds 1/N of the weights (optimizer /N)."""
    g = shards(p, s.n)
    sp = p.name.endswith("sp")
    f = p.fwd / g
    norm = 0.05 * p.fwd / (g if sp else 1.0)  # replicated LayerNorm, unless sequence parallel
    step_begin(s, p)
    for _ in range(p.layers):  # forward
        for block in ("attn", "mlp"):
            _op(s, p, LAYER_NORM, norm, "aten::native_layer_norm")
            if sp:
                _tp_comm(s, p, "allgather", "all_gather_into_tensor")
            if block == "attn":
                _op(s, p, "gemm", 0.3 * f, "aten::linear")
                _op(s, p, FLASH_FWD, 0.2 * f, "FlashAttnFunc")
                _op(s, p, "gemm", 0.1 * f, "aten::linear")
            else:
                _op(s, p, "gemm", 0.2 * f, "aten::linear")
                _op(s, p, GELU, 0.05 * f, "aten::gelu")
                _op(s, p, "gemm", 0.2 * f, "aten::linear")
            if sp:
                _tp_comm(s, p, "reduce_scatter", "reduce_scatter_tensor")
            else:
                _tp_comm(s, p, "allreduce", "allreduce")
    s.thread = 1 if s.style.bwd_thread else 0
    bwd = "autograd::engine::evaluate_function: "
    for _ in range(p.layers):  # backward: MLP then attention of each layer, last layer first
        for block in ("mlp", "attn"):
            if sp:  # the backward of the ReduceScatter after the row-parallel GEMM
                _tp_comm(s, p, "allgather", "all_gather_into_tensor")
            if block == "mlp":
                _op(s, p, "gemm", 0.4 * f, bwd + "MmBackward0")
                _op(s, p, GELU, 0.1 * f, bwd + "GeluBackward0")
                _op(s, p, "gemm", 0.4 * f, bwd + "MmBackward0")
            else:
                _op(s, p, "gemm", 0.2 * f, bwd + "MmBackward0")
                _op(s, p, FLASH_BWD, 0.5 * f, bwd + "FlashAttnFuncBackward")
                _op(s, p, "gemm", 0.6 * f, bwd + "MmBackward0")
            if sp:
                _tp_comm(s, p, "reduce_scatter", "reduce_scatter_tensor")
            else:
                _tp_comm(s, p, "allreduce", "allreduce")
            _op(s, p, LAYER_NORM, 2 * norm, bwd + "NativeLayerNormBackward0")
    if s.thread:
        s.thread = 0
        s.host(8e-6)
    step_end(s, p, True, False, p.optimizer / sharded(p, s.n))
