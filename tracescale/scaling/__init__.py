"""Scaling stage: RunBreakdowns at several world sizes -> speedup, fits, serial fraction,
projections. Pure functions; see :func:`analyze_scaling`."""

from tracescale.scaling.analyze import analyze_scaling
from tracescale.scaling.result import (
    ModelInfo,
    Overhead,
    Projection,
    ScalingPoint,
    ScalingResult,
    SerialFraction,
    StepStats,
    WhatIf,
)

__all__ = [
    "ModelInfo",
    "Overhead",
    "Projection",
    "ScalingPoint",
    "ScalingResult",
    "SerialFraction",
    "StepStats",
    "WhatIf",
    "analyze_scaling",
]
