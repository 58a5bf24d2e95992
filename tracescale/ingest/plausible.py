"""A decoded trace's sanity checks before analysis: usable events, plausible durations.

The decoder skips events it cannot read (string or missing ``ts``/``dur``, negative ``dur``),
so a file can decode to nothing usable; analyzing that would report a "0 ms" step, so it is an
invalid trace instead. A duration can also be readable yet impossible: a kernel that runs for
six days, or one longer than the profiler's own recording window. Such an event would become
the step time, so it is dropped and counted as skipped (a warning). A process group's claimed
``Group size`` beyond the world-size ceiling (:mod:`.claims`) refuses the file: it would size
the group's member list.
"""

from __future__ import annotations

import dataclasses

from tracescale.errors import InvalidTraceError
from tracescale.ingest.claims import check_world_size
from tracescale.ingest.trace import RankTrace

#: No single profiled event lasts a day; longer durations are corrupt clocks or units.
MAX_EVENT_NS = 24 * 3600 * 10**9
#: How far past the profiler's own recording window an event may run (async GPU work drains).
_SLACK_NS = 10**9
_WINDOW_CATEGORY = "Trace"  # Kineto's "PyTorch Profiler (N)" range: the recording window
NESTED_TOO_DEEPLY = "JSON nested too deeply to read (not a Kineto trace)"
SKIP_LABEL = "events with implausible dur (over a day, or longer than the trace's window)"


def recording_window_ns(trace: RankTrace) -> int | None:
    """Length of the profiler's own recording window (its ``cat: Trace`` range), if present.

    The span of the other events is no measure: a sparse trace's outer ProfilerStep can be
    seconds long around a few microsecond events, and that is a real step.
    """
    cat = trace.string_id(_WINDOW_CATEGORY)
    if cat < 0:
        return None
    ev = trace.events
    durations = ev.dur[ev.cat == cat]
    return int(durations.max()) if durations.size else None


def vet(trace: RankTrace) -> RankTrace:
    """``trace`` without implausible events; InvalidTraceError when nothing usable is left."""
    ev = trace.events
    if len(ev) == 0:
        raise InvalidTraceError(_nothing_usable(trace), path=trace.meta.path)
    if ev.group_size.size:
        check_world_size(int(ev.group_size.max()), path=trace.meta.path, field="'Group size'")
    limit = MAX_EVENT_NS
    window = recording_window_ns(trace)
    if window is not None:
        limit = min(limit, window + _SLACK_NS)
    bad = ev.dur > limit
    if window is not None:
        bad &= ev.cat != trace.string_id(_WINDOW_CATEGORY)
        bad |= ev.dur > MAX_EVENT_NS
    if not bad.any():
        return trace
    kept = ev.take(~bad)
    if len(kept) == 0:
        raise InvalidTraceError(_nothing_usable(trace), path=trace.meta.path)
    skipped = dict(trace.meta.skipped)
    skipped[SKIP_LABEL] = skipped.get(SKIP_LABEL, 0) + int(bad.sum())
    meta = dataclasses.replace(trace.meta, skipped=skipped)
    return dataclasses.replace(trace, meta=meta, events=kept)


def _nothing_usable(trace: RankTrace) -> str:
    skipped = trace.meta.skipped
    why = "; ".join(f"{n} {what}" for what, n in skipped.items() if n) or "none present"
    return f"no usable complete (ph 'X') event with numeric, in-range ts and dur (skipped: {why})"
