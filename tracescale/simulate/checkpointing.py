"""The ``act_ckpt`` modifier: activation checkpointing, each layer's forward run again in its
backward, shaped as reentrant ``torch.utils.checkpoint`` writes it into a Kineto trace.

Why: checkpointing trades memory for time, and the time is compute that scales like compute;
only the trace's structure tells a reader it is a lever. With ``use_reentrant=True`` the
autograd engine runs one ``CheckpointFunctionBackward`` node per checkpointed segment (a
layer here): inside it the forward ops again (``aten::linear`` ... the same kernels), then the
segment's own backward nodes (``autograd::engine::evaluate_function: AddmmBackward0`` ...),
nested inside. The kernels launched inside the node but outside its nested backward nodes are
the recomputation; the engine tallies their GPU time (truth's ``recompute``).
"""

from __future__ import annotations

import numpy as np

from tracescale.simulate import kernels as K
from tracescale.simulate.engine import Engine, Times

NODE = "autograd::engine::evaluate_function: CheckpointFunctionBackward"
FUNCTION = "CheckpointFunctionBackward"
#: host time of the autograd node before and after its contents (ns)
WRAP_NS = 600
RECOMPUTE = "recompute"


def _share(total: Times, cum: list[float], j: int) -> Times:
    return np.rint(total * cum[j + 1]).astype(np.int64) - np.rint(total * cum[j]).astype(np.int64)


def open_region(
    e: Engine, fwd: Times, layer: int, cum: list[float], mask: np.ndarray | None = None
) -> tuple[Times, Times]:
    """Enter the layer's checkpoint node and recompute its forward (``fwd``: the phase's
    forward GPU time, ``cum`` its kernels' cumulative shares); returns the region's starts."""
    outer = e.h.copy()
    e.h = e.h + WRAP_NS
    inner = e.h.copy()
    per = len(K.FWD_LAYER)
    for i, (ops, name, _) in enumerate(K.FWD_LAYER):
        dur = _share(fwd, cum, layer * per + i)
        e.kernel(ops, name, dur)
        e.tally(RECOMPUTE, dur, mask)
    return outer, inner


def close_region(e: Engine, starts: tuple[Times, Times]) -> None:
    """Leave the node after the segment's own backward (nested inside it)."""
    outer, inner = starts
    e.annotate("cpu_op", FUNCTION, inner)
    e.h = e.h + WRAP_NS
    e.annotate("cpu_op", NODE, outer)
