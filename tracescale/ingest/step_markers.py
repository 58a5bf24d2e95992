"""Step markers other than ``ProfilerStep``: what a trace without it repeats once per step.

Inference servers (vLLM, SGLang) and hand-rolled loops never call ``profiler.step()``; their
steps are user annotations (``step[DECODE bs=32]``, ``execute_model``) or, in training, the
optimizer's ``Optimizer.step#SGD.step``. Without a marker the whole traced span is one step and
every per-step figure is a mean over one. Candidates are the main thread's top-level
``user_annotation`` ranges (not inside another annotation) that repeat without overlapping,
grouped by their name up to the first ``[``, ``#`` or ``(`` (``step[DECODE bs=32]`` and
``step[PREFILL bs=4]`` are one marker). They are preferred in this order, the first usable one
chosen:

1. a serving or training step annotation by name (``step``, ``execute_model``, ...);
2. an annotation the GPU repeats too (a ``gpu_user_annotation`` twin: the range was recorded
   on a stream, which ``record_function`` does around whole steps);
3. the optimizer step: it closes each step, so steps run from one optimizer end to the next;
4. any other repeated top-level annotation that covers at least half the span between its
   first start and last end (one that covers less is a phase, not a step).

``--step-marker REGEX`` names one instead (``[steps] marker`` in a rules file); it matches any
main-thread host event name, and a marker covering under half its span is read as a boundary
(from one end to the next), like the optimizer step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from tracescale.ingest.trace import I64, RankTrace

#: A repeated annotation covering less than this share of its span is a boundary, not a window.
MIN_COVERAGE = 0.5
#: Names that say "one step" in serving engines and training loops.
_STEP_NAME = re.compile(
    r"(?i)^(step|execute_model|model_step|engine_step|train_step|training_step|"
    r"forward_step|iteration|decode_step|prefill_step|schedule_and_execute|run_batch|"
    r"execute_context)$"
)
#: vLLM's and SGLang's per-step annotation carries the batch's token counts in its name
#: (``execute_32_context_0(...)_generation_32(...)``, ``execute_context_1(...)``): one key.
_SERVING_STEP = re.compile(r"^execute_(\d+_)?context_\d+\b.*$")
_OPTIMIZER = re.compile(r"^Optimizer\.step#")
_KEY_CUT = re.compile(r"[\[#(].*$")
#: Data loading repeats once per step but is a phase of it, never the step.
_DATA = re.compile(r"^enumerate$|DataLoader|DataPipe|data_load")
_PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
_WHY = ("step annotation", "GPU annotation twin", "optimizer step", "repeated annotation")


@dataclass(frozen=True)
class Marker:
    """One candidate marker of a rank: its key, how many times it repeats, why it qualifies
    or not (``usable``), and whether its steps are its own ranges or run end to end."""

    key: str
    count: int
    why: str
    usable: bool
    boundary: bool
    starts: I64
    ends: I64


def marker_key(name: str) -> str:
    """``step[DECODE bs=32]`` -> ``step``; ``Optimizer.step#SGD.step`` -> ``Optimizer.step``."""
    if _SERVING_STEP.match(name):
        return "execute_context"
    return _KEY_CUT.sub("", name).strip() or name


def _top_level(starts: I64, ends: I64) -> np.ndarray:
    """Mask of the intervals not inside an earlier-starting one (ranges of one thread nest)."""
    if starts.shape[0] == 0:
        return np.zeros(0, dtype=np.bool_)
    order = np.lexsort((-ends, starts))
    e = ends[order]
    before = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(e)[:-1]])
    top = np.zeros(starts.shape[0], dtype=np.bool_)
    top[order] = e > before
    return top


def _coverage(starts: I64, ends: I64) -> float:
    span = int(ends.max() - starts.min())
    return float((ends - starts).sum()) / span if span > 0 else 0.0


def _non_overlapping(starts: I64, ends: I64) -> bool:
    order = np.argsort(starts, kind="stable")
    return bool(np.all(starts[order][1:] >= ends[order][:-1]))


def _tier(key: str, twins: set[str]) -> int:
    """Preference of a marker key (see the module docstring); the optimizer step is a
    boundary even when the GPU repeats it."""
    if _STEP_NAME.match(key):
        return 0
    if _OPTIMIZER.match(key + "#"):
        return 2
    return 1 if key in twins else 3


def candidates(trace: RankTrace, pid: int, tid: int) -> list[Marker]:
    """Every repeated top-level annotation of the (pid, tid) thread, best first."""
    ev = trace.events
    cat_id = trace.string_id("user_annotation")
    if cat_id < 0:
        return []
    sel = (ev.pid == pid) & (ev.tid == tid) & ~ev.is_device & (ev.cat == cat_id) & (ev.dur > 0)
    step_mask = trace.string_mask(lambda s: bool(_PROFILER_STEP.match(s)), steps_alike=True)
    if step_mask.shape[0]:
        sel &= ~step_mask[ev.name]
    idx = np.flatnonzero(sel)
    if idx.shape[0] == 0:
        return []
    starts, ends = ev.start[idx], ev.start[idx] + ev.dur[idx]
    top = _top_level(starts, ends)
    gpu_cat = trace.string_id("gpu_user_annotation")
    twins: set[str] = set()
    if gpu_cat >= 0:
        gpu_names = np.unique(ev.name[ev.is_device & (ev.cat == gpu_cat)])
        twins = {marker_key(s) for s in trace.names(gpu_names.astype(np.int32))}
    keys = [marker_key(s) for s in trace.names(ev.name[idx])]
    groups: dict[str, list[int]] = {}
    for j, k in enumerate(keys):
        if top[j]:
            groups.setdefault(k, []).append(j)
    out: list[tuple[int, float, Marker]] = []
    for key, members in groups.items():
        if len(members) < 2:
            continue
        m = np.array(members, dtype=np.int64)
        s, e = starts[m], ends[m]
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        cover = _coverage(s, e)
        tier = _tier(key, twins)
        if _DATA.search(key):
            why = "not usable: data loading is a phase of a step"
        elif not _non_overlapping(s, e):
            why = "not usable: its ranges overlap"
        elif tier != 2 and cover < MIN_COVERAGE:
            why = f"not usable: covers {cover:.0%} of its span (a phase, not a step)"
        else:
            why = _WHY[tier]
        usable = not why.startswith("not usable")
        out.append((tier, -cover, Marker(key, len(members), why, usable, tier == 2, s, e)))
    out.sort(key=lambda t: (not t[2].usable, t[0], t[1], -t[2].count, t[2].key))
    return [m for _, _, m in out]


def named(trace: RankTrace, pid: int, tid: int, pattern: re.Pattern[str]) -> Marker | None:
    """The user's marker: top-level main-thread host events whose name matches ``pattern``."""
    ev = trace.events
    table = trace.string_mask(lambda s: bool(pattern.search(s)))
    if table.shape[0] == 0:
        return None
    sel = (ev.pid == pid) & (ev.tid == tid) & ~ev.is_device & table[ev.name] & (ev.dur > 0)
    idx = np.flatnonzero(sel)
    if idx.shape[0] == 0:
        return None
    starts, ends = ev.start[idx], ev.start[idx] + ev.dur[idx]
    top = _top_level(starts, ends)
    s, e = starts[top], ends[top]
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    boundary = _coverage(s, e) < MIN_COVERAGE or not _non_overlapping(s, e)
    if boundary and s.shape[0] < 2:
        return None
    key = f"--step-marker {pattern.pattern!r}"
    return Marker(key, int(s.shape[0]), "named by the user", True, boundary, s, e)


def windows(marker: Marker) -> tuple[I64, I64]:
    """Host windows of a marker: its own ranges, or from each end to the next (boundary)."""
    if marker.boundary:
        return marker.ends[:-1].copy(), marker.ends[1:].copy()
    return marker.starts.copy(), marker.ends.copy()
