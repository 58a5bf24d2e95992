"""Which GPU kernels are communication: the one family list that classify and inspect share.

A kernel moves data between GPUs when its library says so in its name; nothing else in a Kineto
trace marks it (``cat`` is ``kernel`` for a GEMM and for an all-to-all alike). Libraries outside
NCCL name their kernels differently, and a trace whose expert-parallel all-to-all runs in DeepEP
kernels would otherwise show "communication 0 ms". Each family is a regular expression searched
anywhere in the demangled name (kernels often read ``void deep_ep::intranode::dispatch<...>``).

``gpu_user_annotation`` ranges (``nccl:all_reduce`` written by the backend around its kernel) are
never kernels: the rules classify them as ``ignore`` before this list is consulted, so a
collective with a kernel and an annotation counts once.

The list reaches the rule engine as the built-in rule ``builtin = "communication_kernels"`` in
``default_rules.toml``; a user's ``--rules`` file adds kernels with its own ``[[device]]`` rules
(``target = "communication"``), which are tried first.
"""

from __future__ import annotations

import re
from typing import Final

#: Family -> pattern (searched in the kernel name). Order is the documentation order only.
COMM_FAMILIES: Final[dict[str, str]] = {
    # NVIDIA NCCL (ncclKernel_*, ncclDevKernel_*), AMD RCCL (same names, ncclDevKernel_Generic),
    # Huawei/Habana HCCL, Microsoft MSCCL/MSCCL++, PyTorch's XCCL prefix, rccl_* helpers.
    "nccl": r"(?:^|[\s:])(?:nccl|rccl|hccl|msccl|xccl)\w*",
    # DeepSeek DeepEP expert-parallel all-to-all (intranode, internode, low-latency).
    "deepep": r"\bdeep_ep::(?:intranode|internode|internode_ll)::\w*(?:dispatch|combine|notify)",
    # NVSHMEM device and host-initiated collectives / RMA kernels.
    "nvshmem": r"\bnvshmem[ix]?_\w+",
    # vLLM custom all-reduce (one- and two-stage) and its quick-reduce variant.
    "vllm": r"\bcross_device_reduce_[12]stage\b|\bquickreduce::\w*all_?reduce",
    # PyTorch symmetric-memory kernels (c10d::symmetric_memory::*, one/two-shot, multimem).
    "symm_mem": (
        r"\bsymmetric_memory::\w+|\b(?:one|two)_shot_all_(?:reduce|gather)\w*"
        r"|\bmultimem_(?:all_reduce|all_gather|one_shot|reduce_scatter)\w*"
    ),
    # Intel oneCCL (SYCL kernels in the ccl namespace or named oneccl_*).
    "oneccl": r"(?:^|[\s:<])(?:oneccl_\w+|ccl::\w+)",
}

_FAMILY_RX: Final[tuple[tuple[str, re.Pattern[str]], ...]] = tuple(
    (family, re.compile(pattern)) for family, pattern in COMM_FAMILIES.items()
)

#: All families as one pattern: the built-in device rule ``communication_kernels``.
COMM_KERNEL_PATTERN: Final[str] = "|".join(f"(?:{p})" for p in COMM_FAMILIES.values())

#: Built-in rule patterns a rules file may name with ``builtin = "..."``.
BUILTIN_PATTERNS: Final[dict[str, str]] = {"communication_kernels": COMM_KERNEL_PATTERN}


def comm_family(name: str) -> str | None:
    """The communication family of a kernel name (``nccl``, ``deepep``, ...), or None."""
    for family, rx in _FAMILY_RX:
        if rx.search(name):
            return family
    return None


def is_comm_kernel(name: str) -> bool:
    """True when a kernel name belongs to one of :data:`COMM_FAMILIES`."""
    return comm_family(name) is not None
