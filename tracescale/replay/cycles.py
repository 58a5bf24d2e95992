"""Cycles of steps: a run's graph and kept steps in, one weight per kept step out, so a mean
over the steps counts every phase of a repeating cycle equally.

Why: with gradient accumulation every k-th step differs (its collectives and optimizer), and a
profile rarely holds a whole number of cycles (8 steps of a 3-step cycle hold 2 optimizer
steps, not 8/3). The plain mean then weighs the expensive phase by 2/8 instead of 1/3: small
where that phase is cheap (one GPU) and growing with N as its collectives grow, which read as
a speedup 10-28% too high at 2-8x the largest run. Steps repeat exactly in what they launch,
so the cycle is the shortest period of the per-step count of device nodes.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tracescale.replay.graph import DEV, Graph

F64 = npt.NDArray[np.float64]


def cycle_period(signature: npt.NDArray[np.int64]) -> int:
    """Shortest period p >= 2 with ``signature[k] == signature[k + p]`` for every k, holding at
    least one whole repeat (p <= len/2); 1 when the steps are alike or show no cycle."""
    n = len(signature)
    if n < 2 or bool(np.all(signature == signature[0])):
        return 1
    for p in range(2, n // 2 + 1):
        if bool(np.all(signature[p:] == signature[:-p])):
            return p
    return 1


def cycle_weights(graph: Graph, kept: npt.NDArray[np.bool_]) -> F64:
    """Per kept step, its weight in the mean step (sum 1): each phase of the cycle weighs
    1/period, shared by the kept steps in that phase; equal weights without a cycle."""
    on = (graph.kind >= DEV) & (graph.dur > 0) & (graph.step >= 0)
    counts = np.bincount(graph.step[on], minlength=len(kept))[: len(kept)]
    return phase_weights(counts[kept].astype(np.int64))


def phase_weights(signature: npt.NDArray[np.int64]) -> F64:
    """:func:`cycle_weights` from the kept steps' signatures (device nodes per step)."""
    m = len(signature)
    if m == 0:
        return np.zeros(0)
    p = cycle_period(signature)
    if p == 1 or m % p == 0:
        return np.full(m, 1.0 / m)
    phase = np.arange(m) % p
    per_phase = np.bincount(phase, minlength=p)
    return 1.0 / (p * per_phase[phase])


def weighted_mean(steps: F64, weights: F64) -> float:
    """The cycle-weighted mean of ``steps`` (the plain mean when the weights do not fit)."""
    if len(steps) == 0:
        return float("nan")
    if len(weights) != len(steps):
        return float(np.mean(steps))
    return float(np.sum(steps * weights))
