"""Kernel and collective spellings of the independent studies, as PyTorch 2.x and NCCL write."""

from __future__ import annotations

from .sched import protocol

GEMM_BIG = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execu"
    "te_segment_k_off_kernel__5x_cublas"
)
GEMM_SMALL = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64_warpgroupsize1x1x1_execut"
    "e_segment_k_off_kernel__5x_cublas"
)
GELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at:"
    ":TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lamb"
    "da()#1}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> "
    ">(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)"
    "::{lambda()#2}::operator()() const::{lambda()#1}::operator()() const::{lambda(c10::B"
    "Float16)#1}, at::detail::Array<char*, 2>)"
)
ADAM = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anony"
    "mous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdam"
    "MathFunctor<c10::BFloat16, 4, (at::native::ADAM_MODE)1, false>, bool, float, float, "
    "float, float, float, float*, float*, float*>(at::native::(anonymous namespace)::Tens"
    "orListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<c10::BFlo"
    "at16, 4, (at::native::ADAM_MODE)1, false>, bool, float, float, float, float, float, "
    "float*, float*, float*)"
)
SMALL = (
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::n"
    "ative::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() "
    "const::{lambda()#8}::operator()() const::{lambda(c10::BFloat16)#1}> >(int, at::nativ"
    "e::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase"
    "&)::{lambda()#3}::operator()() const::{lambda()#8}::operator()() const::{lambda(c10:"
    ":BFloat16)#1}>)"
)

STEMS = {"allreduce": "AllReduce", "allgather": "AllGather", "reduce_scatter": "ReduceScatter",
         "broadcast": "Broadcast"}  # fmt: skip


def nccl_kernel(coll: str, nbytes: float, legacy: bool, fp32: bool = False) -> str:
    """NCCL's kernel name: ``ncclKernel_*`` (legacy), ``ncclDevKernel_*(ncclDevComm*, ...)``, or
    NCCL >= 2.19's ``ncclDevKernel_*(ncclDevKernelArgsStorage<4096ul>)`` (``fp32``)."""
    proto, _ = protocol(nbytes)
    stem = STEMS[coll]
    dt = "f32" if fp32 else "bf16"
    sig = (
        "(ncclDevKernelArgsStorage<4096ul>)" if fp32 else "(ncclDevComm*, unsigned long, ncclWork*)"
    )
    if legacy:
        return f"ncclKernel_{stem}_RING_{proto}_Sum_{dt}{sig}"
    if coll in ("allreduce", "reduce_scatter"):
        return f"ncclDevKernel_{stem}_Sum_{dt}_RING_{proto}{sig}"
    return f"ncclDevKernel_{stem}_RING_{proto}{sig}"
