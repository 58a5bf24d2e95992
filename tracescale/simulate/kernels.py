"""Realistic op and kernel names of the simulated model (a stack of Linear+ReLU+LayerNorm).

Each entry: (cpu_op chain outermost first, kernel name, share of the layer's forward or
backward GPU time). Shares of a layer sum to 1.
"""

from __future__ import annotations

GEMM_FWD = (
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4>"
    "(cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4::Params)"
)
RELU_FWD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
    "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::"
    "operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >"
    "(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, "
    "c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() "
    "const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)"
)
LN_FWD = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>"
    "(int, float, float const*, float const*, float const*, float*, float*, float*)"
)
LN_BWD = (
    "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<float, float>"
    "(float const*, float const*, float const*, float const*, float const*, float*, int)"
)
RELU_BWD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)"
    "#1}, at::detail::Array<char*, 3> >(int, at::native::(anonymous namespace)::"
    "threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)"
    "#1}, at::detail::Array<char*, 3>)"
)
GEMM_BWD_IN = "volta_sgemm_128x64_nn"
GEMM_BWD_W = "volta_sgemm_128x64_nt"
FILL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1>)"
)
OPT = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
    "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
    "BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(at::native::"
    "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
    "BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)"
)
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
H2D = "Memcpy HtoD (Pageable -> Device)"
D2H = "Memcpy DtoH (Device -> Pageable)"
DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"

KernelSpec = tuple[tuple[str, ...], str, float]

FWD_LAYER: tuple[KernelSpec, ...] = (
    (("aten::linear", "aten::addmm"), GEMM_FWD, 0.7),
    (("aten::relu", "aten::clamp_min"), RELU_FWD, 0.1),
    (("aten::layer_norm", "aten::native_layer_norm"), LN_FWD, 0.2),
)

BWD_LAYER: tuple[KernelSpec, ...] = (
    (
        (
            "autograd::engine::evaluate_function: NativeLayerNormBackward0",
            "NativeLayerNormBackward0",
            "aten::native_layer_norm_backward",
        ),
        LN_BWD,
        0.15,
    ),
    (
        (
            "autograd::engine::evaluate_function: ReluBackward0",
            "ReluBackward0",
            "aten::threshold_backward",
        ),
        RELU_BWD,
        0.1,
    ),
    (
        ("autograd::engine::evaluate_function: AddmmBackward0", "AddmmBackward0", "aten::mm"),
        GEMM_BWD_IN,
        0.4,
    ),
    (
        ("autograd::engine::evaluate_function: AddmmBackward0", "AddmmBackward0", "aten::mm"),
        GEMM_BWD_W,
        0.35,
    ),
)

GRID = {GEMM_FWD: [128, 4, 1], GEMM_BWD_IN: [64, 8, 1], GEMM_BWD_W: [64, 8, 1]}


def cumulative(layer: tuple[KernelSpec, ...], layers: int) -> list[float]:
    """Cumulative share of the phase's GPU time before each kernel (len = kernels + 1)."""
    out = [0.0]
    per_layer = [w for _, _, w in layer]
    total = sum(per_layer)
    acc = 0.0
    for _ in range(layers):
        for w in per_layer:
            acc += w / total
            out.append(acc / layers)
    out[-1] = 1.0
    return out
