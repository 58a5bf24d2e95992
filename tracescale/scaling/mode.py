"""Strong vs weak scaling, decided from how per-rank compute changes with N.

Tensor shapes decide first when the traces recorded them (classify.work_size): splitting a
fixed global batch shrinks the ops' inputs, weak scaling keeps them, and neither is fooled by an
oversubscribed machine whose per-rank compute grows with N. Without shapes, timing decides:
strong scaling divides a fixed problem: per-rank compute falls like 1/N (log-log slope -1).
Weak scaling keeps the work per rank: compute stays flat (slope 0). The replicated part
(``serial_compute``, e.g. Optimizer.step) is taken out first, because it is constant in both
modes and would drag a strong study's slope towards 0. The threshold is the geometric
midpoint, slope -0.5.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tracescale.classify.work_size import mode_from_shapes
from tracescale.errors import UsageError
from tracescale.scaling.stats import RunAgg

MODES = ("auto", "strong", "weak")


def detect_mode(
    aggs: Sequence[RunAgg],
    requested: str = "auto",
    inputs: Sequence[Mapping[str, float]] | None = None,
) -> tuple[str, str]:
    """Return (mode, reason); the reason quotes the numbers the decision was made on.

    ``inputs``: per run (in ``aggs`` order), median input elements per op input
    (``RunBreakdown.input_sizes``); shapes decide when they can.
    """
    if requested not in MODES:
        raise UsageError(f"--mode must be one of {', '.join(MODES)}, not {requested!r}")
    given_sizes = [a.world_size for a in aggs]  # the order ``inputs`` is in
    aggs = sorted(aggs, key=lambda a: a.world_size)
    if requested != "auto":
        return requested, f"{requested} scaling as requested (--mode {requested})"
    if len(aggs) < 2:
        only = aggs[0].world_size if aggs else 0
        return "strong", (
            f"only one world size (N={only}): the mode cannot be measured; assuming strong "
            "scaling (pass --mode weak if the work per rank was kept constant)"
        )
    if inputs is not None and len(inputs) == len(aggs):
        verdict = mode_from_shapes(given_sizes, inputs)
        if verdict.mode is not None:
            return verdict.mode, verdict.reason
    par = np.array([max(a.cats["compute"] - a.serial_compute, 0.0) for a in aggs])
    what = "per-rank parallel compute (without Optimizer.step and other replicated work)"
    if np.any(par <= 0):
        par = np.array([a.cats["compute"] for a in aggs])
        what = "per-rank compute"
    if np.any(par <= 0):
        par = np.array([a.total for a in aggs])
        what = "per-rank step time (no compute was attributed)"
    n = np.array([a.world_size for a in aggs], dtype=np.float64)
    slope = float(np.polyfit(np.log(n), np.log(np.maximum(par, 1e-12)), 1)[0])
    mode = "strong" if slope < -0.5 else "weak"
    ratio = par[-1] / par[0]
    shape = "about 1/N" if mode == "strong" else "about constant"
    reason = (
        f"{what} went from {par[0] * 1e3:.3g} ms at N={int(n[0])} to {par[-1] * 1e3:.3g} ms "
        f"at N={int(n[-1])} (x{ratio:.3f}; 1/N would be x{n[0] / n[-1]:.3f}, constant x1; "
        f"log-log slope {slope:.2f}): {shape}, so {mode} scaling"
    )
    return mode, reason
