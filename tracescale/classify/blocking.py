"""A rank's trace in -> which runtime calls block the host (asynchronous copies that are not),
and whether its steps capture CUDA graphs (a one-time cost, not a step's).

``cudaMemcpyAsync`` (``hipMemcpyAsync``, ``cuMemcpy*Async``) returns at once only between device
memory and pinned host memory. With pageable host memory the driver stages the copy, and the
call returns when the copy is done: the host waits for every kernel queued before it, as in a
``cudaStreamSynchronize``. That is how ``.cpu()``, ``.item()`` and ``.tolist()`` of a tensor
not in pinned memory look in a trace (HTA's negative-queue example waits 147 ms in one such
call per step, which read as host overhead: "fewer, larger or fused ops"). Kineto names the
copy by its memory kinds (``Memcpy DtoH (Device -> Pageable)``), and the call and its copy
share one correlation id, so the call is told by its own copy, not by its name alone, and
only when it returned once that copy was done (the trace shows it waited).
"""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt

from tracescale.ingest.trace import RankTrace

BOOL = npt.NDArray[np.bool_]

#: Asynchronous copy calls (CUDA runtime and driver, HIP).
ASYNC_COPY = re.compile(r"^(cuda|hip)Memcpy(2D|3D)?Async$|^cuMemcpy\w*Async(_v2)?$")
#: A device copy between device memory and pageable host memory (Kineto's names).
PAGEABLE = re.compile(r"Pageable")


def blocking_copies(trace: RankTrace) -> BOOL:
    """Per event: an asynchronous copy call whose device copy moves pageable host memory."""
    ev = trace.events
    out = np.zeros(len(ev.start), dtype=np.bool_)
    if not len(out):
        return out
    calls = trace.string_mask(lambda s: ASYNC_COPY.search(s) is not None, steps_alike=True)
    pageable = trace.string_mask(lambda s: PAGEABLE.search(s) is not None, steps_alike=True)
    named = ev.name >= 0
    name = np.clip(ev.name, 0, None)
    is_call = ~ev.is_device & named & calls[name] & (ev.correlation >= 0)
    is_copy = ev.is_device & named & pageable[name] & (ev.correlation >= 0)
    if not is_call.any() or not is_copy.any():
        return out
    corr = ev.correlation[is_copy]
    order = np.argsort(corr, kind="stable")
    corr, copy_end = corr[order], (ev.start + ev.dur)[is_copy][order]
    rows = np.flatnonzero(is_call)
    at = np.clip(np.searchsorted(corr, ev.correlation[rows]), 0, len(corr) - 1)
    paired = corr[at] == ev.correlation[rows]
    # it blocked only if it returned once its copy was done (a staged copy that returns
    # first, as a small one may, left the host free)
    returned_after = ev.start[rows] + ev.dur[rows] + RETURN_SLACK_NS >= copy_end[at]
    out[rows[paired & returned_after]] = True
    return out


#: A call returning this long before its copy ends still waited for it (clock granularity).
RETURN_SLACK_NS = 1_000


#: Stream capture calls: the traced span records CUDA/HIP graphs instead of running them.
CAPTURE_CALL = re.compile(r"^(cuda|hip)StreamBeginCapture\w*$|^cuStreamBeginCapture\w*$")
#: The warning's start, which the findings look for (:mod:`tracescale.findings.warmup`).
CAPTURE_NOTE = "CUDA graph capture inside the steps"


def capture_note(trace: RankTrace, lo: int, hi: int) -> str | None:
    """A warning when the steps in ``[lo, hi)`` (ns) begin stream captures, else None: their
    host time is capture and compilation (vLLM's and torch.compile's warm-up), paid once."""
    ev = trace.events
    calls = trace.string_mask(lambda s: CAPTURE_CALL.search(s) is not None, steps_alike=True)
    if not calls.any():
        return None
    named = ev.name >= 0
    hit = named & calls[np.clip(ev.name, 0, None)] & (ev.start >= lo) & (ev.start < hi)
    count = int(hit.sum())
    if count == 0:
        return None
    return (
        f"{CAPTURE_NOTE} ({count} stream capture{'s' if count > 1 else ''} begun): their "
        "host time is capture and compilation, paid once; profile the replayed graphs"
    )
