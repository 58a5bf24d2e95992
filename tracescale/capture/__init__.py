"""Capture real traces: a ``torch.profiler`` helper for training loops and a torchrun sweep.

torch is imported lazily (only when a capture starts), so ``import tracescale`` and the
analysis never need it; it is the ``capture`` extra.
"""

from __future__ import annotations

from tracescale.capture.profiler import OUT_ENV, Capture, world_out_dir
from tracescale.capture.sweep import (
    ScriptFailedError,
    SweepError,
    SweepRun,
    SweepTimeoutError,
    TorchMissingError,
    build_command,
    parse_nproc,
    run_sweep,
    sweep_env,
)

__all__ = [
    "OUT_ENV",
    "Capture",
    "ScriptFailedError",
    "SweepError",
    "SweepRun",
    "SweepTimeoutError",
    "TorchMissingError",
    "build_command",
    "parse_nproc",
    "run_sweep",
    "sweep_env",
    "world_out_dir",
]
