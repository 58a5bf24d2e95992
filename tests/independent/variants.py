"""Variants of the independent studies: trace conventions and step structures real jobs differ in.

Each variant is a :class:`~tests.independent.gen.Pattern` of gen.py's patterns with another
:class:`~tests.independent.sched.Style` (how stream waits are recorded, which thread runs
backward, step numbering, fp32 and NCCL >= 2.19 kernel names, FSDP2 collective names, delay and
noise shapes, a second host thread), or another step structure (FSDP with prefetch, Megatron
tensor parallel, sequence parallel). The truth comes from the same scheduler, as for gen.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .gen import PATTERNS, Pattern
from .sched import Style


def _styled(base: str, **style: object) -> Callable[[], Pattern]:
    def make() -> Pattern:
        p = PATTERNS[base]()
        return replace(p, style=replace(p.style, **style))  # type: ignore[arg-type]

    return make


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
    "fsdp/fsdp2": _styled(
        "fsdp", waits="events", bwd_thread=True, first_step=37, fp32=True, coalesced=True
    ),
}

__all__ = ["VARIANTS", "Style"]
