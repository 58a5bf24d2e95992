"""Activation recomputation: a rank's events + their launch times in, which events re-run
forward work inside the backward pass out.

Why: activation checkpointing trades memory for time by running parts of the forward again
during backward. That time is compute and scales like compute, so nothing but its name tells
a reader it is a lever (checkpoint fewer layers, or recompute selectively) rather than the
model's own work. Two shapes reach a Kineto trace:

- reentrant checkpointing (``torch.utils.checkpoint`` with ``use_reentrant=True``, Megatron's
  ``tensor_parallel.checkpoint``): the recomputation runs inside a ``CheckpointFunctionBackward``
  autograd node;
- non-reentrant checkpointing: the forward ops run again inside whichever backward node first
  unpacks a saved tensor, with no name of their own; a forward-only composite op
  (:data:`FORWARD_OPS`: ``aten::linear``, ``aten::conv2d``, ... which no backward formula
  calls) inside an ``autograd::engine::evaluate_function`` node is such a recomputation.

An event is recomputation when it starts (a device event: is launched) inside one of those
regions; regions are read per thread for host ops, and over all threads for kernels, whose
launch time is known but not the launching thread.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tracescale.categories import RECOMPUTE_PREFIX
from tracescale.classify.timeline import in_union
from tracescale.ingest.trace import RankTrace

BOOL = npt.NDArray[np.bool_]
I64 = npt.NDArray[np.int64]

#: Autograd's node of reentrant checkpointing (PyTorch, Megatron, DeepSpeed).
CHECKPOINT_BACKWARD = "CheckpointFunctionBackward"
#: The autograd engine's span around each backward node.
BACKWARD_NODE = "autograd::engine::evaluate_function:"
#: Composite forward ops that backward formulas never call: inside a backward node they are
#: the forward run again.
FORWARD_OPS = frozenset(
    {
        "aten::linear",
        "aten::conv1d",
        "aten::conv2d",
        "aten::conv3d",
        "aten::layer_norm",
        "aten::group_norm",
        "aten::batch_norm",
        "aten::embedding",
        "aten::scaled_dot_product_attention",
        "aten::dropout",
        "aten::gelu",
    }
)
#: Prefix of a recomputed op's or kernel's name in the top ops.
PREFIX = RECOMPUTE_PREFIX


def _thread_key(trace: RankTrace, idx: npt.NDArray[np.intp]) -> I64:
    ev = trace.events
    return ev.pid[idx].astype(np.int64) * (1 << 32) + (ev.tid[idx].astype(np.int64) & 0xFFFFFFFF)


def _within_same_thread(
    trace: RankTrace, inner: npt.NDArray[np.intp], outer: npt.NDArray[np.intp]
) -> BOOL:
    """Per event of ``inner``: inside an event of ``outer`` on its own thread."""
    ev = trace.events
    out = np.zeros(len(inner), dtype=np.bool_)
    if len(inner) == 0 or len(outer) == 0:
        return out
    ik, ok = _thread_key(trace, inner), _thread_key(trace, outer)
    for key in np.unique(ik).tolist():
        mine = ik == key
        theirs = outer[ok == key]
        out[mine] = in_union(
            ev.start[theirs], ev.start[theirs] + ev.dur[theirs], ev.start[inner[mine]]
        )
    return out


def recomputed(trace: RankTrace, launched: I64) -> BOOL | None:
    """Per event: run again by activation checkpointing (None: the trace has none).

    Reentrant checkpointing runs the segment's backward inside ``CheckpointFunctionBackward``
    too (``torch.autograd.backward`` on the recomputed outputs): the backward nodes nested
    there are the model's own backward, not recomputation, and are left out."""
    ev = trace.events
    if len(ev) == 0:
        return None
    host = ~ev.is_device & (ev.dur > 0)
    ckpt = trace.string_mask(
        lambda s: CHECKPOINT_BACKWARD in s and not s.startswith(BACKWARD_NODE), steps_alike=True
    )
    node = trace.string_mask(
        lambda s: s.startswith(BACKWARD_NODE) and CHECKPOINT_BACKWARD not in s, steps_alike=True
    )
    fwd = trace.string_mask(lambda s: s in FORWARD_OPS, steps_alike=True)
    checkpoints = np.flatnonzero(host & ckpt[ev.name])
    nodes = np.flatnonzero(host & node[ev.name])
    candidates = np.flatnonzero(host & fwd[ev.name])
    nested = nodes[_within_same_thread(trace, nodes, checkpoints)]
    again = candidates[_within_same_thread(trace, candidates, nodes)]
    if len(checkpoints) == 0 and len(again) == 0:
        return None
    out = np.zeros(len(ev), dtype=np.bool_)
    hosts = np.flatnonzero(host)
    out[hosts] = (
        _within_same_thread(trace, hosts, checkpoints) & ~_within_same_thread(trace, hosts, nested)
    ) | _within_same_thread(trace, hosts, again)
    dev = np.flatnonzero(ev.is_device)

    def covered(idx: npt.NDArray[np.intp]) -> BOOL:
        return in_union(ev.start[idx], ev.start[idx] + ev.dur[idx], launched[dev])

    out[dev] = (covered(checkpoints) & ~covered(nested)) | covered(again)
    return out
