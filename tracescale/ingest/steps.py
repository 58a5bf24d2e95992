"""Step windows: ``ProfilerStep#N`` on the main thread, extended to the GPU work it launched.

Without ``ProfilerStep`` the steps come from another marker the trace repeats (a serving
engine's step annotation, the optimizer step: :mod:`.step_markers`) or the one the user names;
only when there is none is the whole span one step, with a warning.

A step's GPU kernels often run after its host window closes (the host runs ahead). Attributing by
time window would hand them to the next step, so a step's window ends when the last device event
launched from it (matched by ``correlation``) ends, and the next step starts no earlier.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tracescale.errors import UsageError
from tracescale.ingest import step_markers
from tracescale.ingest.claims import MAX_STEP_DIGITS, step_number
from tracescale.ingest.trace import I32, I64, RankTrace

_STEP_PREFIX = "ProfilerStep#"
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_HOST_CATS = ("cpu_op", "Operator", "user_annotation", "python_function", "cuda_runtime", "Runtime")


@dataclass(frozen=True)
class StepWindows:
    """Step windows of one rank, in ns; ``start``/``end`` tile without overlap."""

    numbers: I64
    host_start: I64
    host_end: I64
    start: I64
    end: I64
    main_pid: int
    main_tid: int
    synthetic: bool
    warnings: tuple[str, ...] = ()
    #: What the steps are: "ProfilerStep", an annotation's key, the user's regex, "whole span".
    marker: str = "ProfilerStep"
    #: (key, count, why it is or is not usable) of each repeated top-level annotation.
    candidates: tuple[tuple[str, int, str], ...] = ()

    def __len__(self) -> int:
        return int(self.numbers.shape[0])


def main_thread(trace: RankTrace, step_ids: I32 | None = None) -> tuple[int, int]:
    """The (pid, tid) that drives training: the one with ProfilerStep, else the busiest host one.

    ``step_ids``: :func:`_step_ids` where the caller has them already."""
    ev = trace.events
    step_ids = _step_ids(trace) if step_ids is None else step_ids
    host = ~ev.is_device
    if len(step_ids):
        mask = host & np.isin(ev.name, step_ids)
        if mask.any():
            pids, tids, inverse = _distinct_pairs(ev.pid[mask], ev.tid[mask])
            best = int(np.argmax(np.bincount(inverse)))
            return int(pids[best]), int(tids[best])
    cat_ids = [trace.string_id(c) for c in _HOST_CATS]
    mask = host & np.isin(ev.cat, np.array([c for c in cat_ids if c >= 0], dtype=np.int32))
    if not mask.any():
        mask = host
    if not mask.any():
        return -1, -1
    pids, tids, inverse = _distinct_pairs(ev.pid[mask], ev.tid[mask])
    busy = np.bincount(inverse, weights=ev.dur[mask].astype(np.float64))
    best = int(np.argmax(busy))
    return int(pids[best]), int(tids[best])


def _step_ids(trace: RankTrace) -> I32:
    """Ids of the ``ProfilerStep#N`` names. The regex is asked once for all the names of the
    plain form (``steps_alike``: it matches each of them), one by one for the rest."""
    found = trace.string_mask(lambda s: _STEP_RE.match(s) is not None, steps_alike=True)
    return np.flatnonzero(found).astype(np.int32)


def _step_numbers(trace: RankTrace, ids: I32) -> I64:
    """The N of each ``ProfilerStep#N`` name in ``ids``: of the plain form (ASCII digits up
    to :data:`MAX_STEP_DIGITS`, ``trace.step_names``) read by ``int`` in one map, else through
    the regex and :func:`step_number`, which refuses a corrupt number."""
    table, path, cut = trace.strings, trace.meta.path, len(_STEP_PREFIX)
    names = [table[i] for i in ids.tolist()]
    lengths = np.fromiter(map(len, names), np.int64, len(names))
    plain = trace.step_names[ids] & (lengths <= cut + MAX_STEP_DIGITS)
    if plain.all():
        return np.fromiter((int(n[cut:]) for n in names), np.int64, len(names))
    out: list[int] = []
    for text, simple in zip(names, plain.tolist(), strict=True):
        if simple:
            out.append(int(text[cut:]))
            continue
        match = _STEP_RE.match(text)
        out.append(step_number(match.group(1) if match else text[cut:], path=path))
    return np.array(out, dtype=np.int64)


def _distinct_pairs(a: I64, b: I64) -> tuple[I64, I64, npt.NDArray[np.intp]]:
    """Distinct (a, b) pairs in sorted order and each row's index into them.

    Through one 1-D key of the two columns' dense codes: a 2-D ``np.unique(axis=0)`` sorts
    rows as structs, many times slower on a million events.
    """
    ua, ia = np.unique(a, return_inverse=True)
    ub, ib = np.unique(b, return_inverse=True)
    width = max(len(ub), 1)
    keys, inverse = np.unique(ia.astype(np.int64) * width + ib, return_inverse=True)
    return ua[keys // width], ub[keys % width], inverse.ravel()


def find_steps(trace: RankTrace, marker: str | None = None) -> StepWindows:
    """Step windows, or one synthetic window over the traced span when there are no steps.

    ``marker``: a regex naming the step marker (``--step-marker``), which wins over
    ``ProfilerStep``; without it ``ProfilerStep``, then an annotation (:mod:`.step_markers`).
    """
    ev = trace.events
    step_ids = _step_ids(trace)
    pid, tid = main_thread(trace, step_ids)
    warnings: list[str] = []
    chosen = "ProfilerStep"
    found = step_markers.candidates(trace, pid, tid)
    user = _user_marker(trace, pid, tid, marker, warnings)
    on_main = (ev.pid == pid) & (ev.tid == tid) & ~ev.is_device
    numbers: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    step_numbers = _step_numbers(trace, step_ids)
    if user is not None:
        step_ids = step_ids[:0]
        starts, ends = (w.tolist() for w in step_markers.windows(user))
        numbers, chosen = list(range(len(starts))), user.key
    if len(step_ids):
        numbers, starts, ends, overlapping = _profiler_steps(trace, on_main, step_ids, step_numbers)
        if overlapping:
            warnings.append(f"{overlapping} overlapping ProfilerStep windows ignored")
    auto = next((m for m in found if m.usable), None) if not numbers else None
    if auto is not None:
        starts, ends = (w.tolist() for w in step_markers.windows(auto))
        numbers, chosen = list(range(len(starts))), auto.key
        how = "from one end to the next" if auto.boundary else "its ranges"
        warnings.append(
            f"no ProfilerStep events: steps are the {auto.count} '{auto.key}' annotations "
            f"({auto.why}; {how}); --step-marker REGEX names another"
        )
    synthetic = not numbers
    if synthetic:
        lo, hi = trace.span_ns
        warnings.append("no ProfilerStep events: the whole traced span is treated as one step")
        numbers, starts, ends, chosen = [0], [lo], [hi], "whole span"
    host_start = np.array(starts, dtype=np.int64)
    host_end = np.array(ends, dtype=np.int64)
    gpu_end = _device_end_per_step(trace, host_start, host_end)
    start, end = _tile(host_start, np.maximum(host_end, gpu_end))
    return StepWindows(
        numbers=np.array(numbers, dtype=np.int64),
        host_start=host_start,
        host_end=host_end,
        start=start,
        end=end,
        main_pid=pid,
        main_tid=tid,
        synthetic=synthetic,
        warnings=tuple(warnings),
        marker=chosen,
        candidates=tuple((m.key, m.count, m.why) for m in found),
    )


def _profiler_steps(
    trace: RankTrace, on_main: npt.NDArray[np.bool_], names: I32, name_numbers: I64
) -> tuple[list[int], list[int], list[int], int]:
    """(numbers, host starts, host ends, how many overlapped) of the ProfilerStep events on
    the main thread (``names``: the step names' ids, ``name_numbers`` their N): in start
    order, each one that starts before the last kept one ends is dropped. Where none
    overlaps (the usual case) that is one comparison of two columns."""
    ev = trace.events
    idx = np.flatnonzero(on_main & np.isin(ev.name, names))  # events are sorted by start
    s_all, e_all = ev.start[idx], ev.start[idx] + ev.dur[idx]
    if not np.any(s_all[1:] < e_all[:-1]):
        keep = np.ones(len(idx), dtype=np.bool_)
    else:  # greedy: whether one is kept hangs on the ones kept before it
        keep = np.zeros(len(idx), dtype=np.bool_)
        last_end = None
        for k, (s, e) in enumerate(zip(s_all.tolist(), e_all.tolist(), strict=True)):
            if last_end is None or s >= last_end:
                keep[k] = True
                last_end = e
    lookup = np.zeros(int(names.max()) + 1, dtype=np.int64)
    lookup[names] = name_numbers
    numbers = lookup[ev.name[idx[keep]]].tolist()
    return numbers, s_all[keep].tolist(), e_all[keep].tolist(), int(len(idx) - keep.sum())


def _tile(host_start: I64, end0: I64) -> tuple[I64, I64]:
    """Windows that tile: each starts no earlier than the previous one ends and ends no earlier
    than it starts. The recurrence ``end[k] = max(end0[k], start0[k], end[k-1])`` is a running
    maximum from the second window on, and ``start[k] = max(start0[k], end[k-1])``."""
    base = np.maximum(end0, host_start)
    base[:1] = end0[:1]  # the first window is kept as it is
    end = np.maximum.accumulate(base)
    start = host_start.copy()
    if len(start) > 1:
        start[1:] = np.maximum(start[1:], end[:-1])
    return start, end


def _user_marker(
    trace: RankTrace, pid: int, tid: int, marker: str | None, warnings: list[str]
) -> step_markers.Marker | None:
    """The user's marker, or None (with a warning when the regex matches no usable event)."""
    if not marker:
        return None
    try:
        pattern = re.compile(marker)
    except (re.error, RecursionError, OverflowError) as exc:
        raise UsageError(f"bad --step-marker regex {marker!r}: {exc}") from exc
    found = step_markers.named(trace, pid, tid, pattern)
    if found is None:
        warnings.append(
            f"--step-marker {marker!r} matches no repeated event on the main thread; "
            "steps found as without it"
        )
    return found


def launch_times(trace: RankTrace) -> I64:
    """For every event, when it was launched: device events at the start of the host call with
    the same ``correlation`` id (else their own start), host events at their start."""
    ev = trace.events
    when = ev.start.copy()
    dev = ev.is_device & (ev.correlation >= 0)
    host_corr = ~ev.is_device & (ev.correlation >= 0)
    if dev.any() and host_corr.any():
        keys = ev.correlation[host_corr]
        order = np.argsort(keys, kind="stable")
        keys_sorted = keys[order]
        host_starts = ev.start[host_corr][order]
        dev_idx = np.flatnonzero(dev)
        pos = np.searchsorted(keys_sorted, ev.correlation[dev_idx])
        pos_ok = pos < len(keys_sorted)
        hit = np.zeros(len(dev_idx), dtype=np.bool_)
        hit[pos_ok] = keys_sorted[pos[pos_ok]] == ev.correlation[dev_idx][pos_ok]
        when[dev_idx[hit]] = host_starts[pos[hit]]
    return when


def launch_step(trace: RankTrace, host_start: I64, host_end: I64, when: I64 | None = None) -> I64:
    """For every event, the index of the step whose host window launched it (-1 if none).

    ``when``: :func:`launch_times` if the caller has it already.
    """
    when = launch_times(trace) if when is None else when
    k = np.searchsorted(host_start, when, side="right") - 1
    inside = (k >= 0) & (when < host_end[np.clip(k, 0, None)])
    return np.where(inside, k, -1).astype(np.int64)


def _device_end_per_step(trace: RankTrace, host_start: I64, host_end: I64) -> I64:
    ev = trace.events
    out = host_end.copy()
    if not ev.is_device.any() or len(host_start) == 0:
        return out
    step = launch_step(trace, host_start, host_end)
    dev = ev.is_device & (step >= 0)
    if dev.any():
        np.maximum.at(out, step[dev], ev.start[dev] + ev.dur[dev])
    return out
