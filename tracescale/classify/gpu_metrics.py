"""HTA-compatible GPU metrics per rank: GPU idle share and communication/computation overlap.

In: one rank's device events with their device class (compute, memcpy, communication) and the
step that launched each; out: per-step interval measures in integer ns (columns
:data:`GPU_STEP_COLUMNS`, carried beside the step table) that add up over whatever steps the
user analyzes, and :func:`rank_gpu_metrics`, which turns the kept steps into the two shares.

Definitions (those of Holistic Trace Analysis, at nanosecond precision):

- ``gpu_idle_pct``: over the span from the start of the first to the end of the last GPU event
  launched in the analyzed steps, the share of time no kernel, memcpy or memset runs on any
  stream of the rank (HTA ``get_temporal_breakdown`` ``idle_time_pctg``). GPU-side waits
  (``Stream Wait Event``, ``cuda_sync``) and ``gpu_user_annotation`` ranges are not GPU work.
- ``comm_comp_overlap_pct``: the share of communication-kernel time (union over streams) during
  which a compute kernel also runs (HTA ``get_comm_comp_overlap``); None without communication.

These answer "how busy was the GPU", not "why was it idle": tracescale's categories explain the
idle time by what the host was doing, and move a rank's wait for a late peer to the late rank's
cause. An event belongs to the step whose host window launched it (HTA keeps kernels by their
launching CPU op, too), so work that runs past a step boundary stays with its step; a kernel
whose launch is not in the trace (launched before profiling began) is placed by its start.
HTA differs there on traces with several ProfilerSteps: it drops such kernels although they
run inside the first step (hta_interop's docstring has the measured cases).

Measures of unions do not simply add over steps when a step's kernels still run while the next
step's start; the table therefore also holds each step's measures taken together with the
previous step (``pair_*``), and the sum over a run of consecutive steps is corrected by
``pair - previous - own`` for every adjacent pair (exact unless three steps' kernels overlap).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, astuple, dataclass

import numpy as np
import numpy.typing as npt

from tracescale.ingest.steps import StepWindows, launch_step
from tracescale.ingest.trace import RankTrace
from tracescale.table import Table, as_table

I64 = npt.NDArray[np.int64]

#: "No GPU event" in the time columns: times may be negative (a clock behind), so not -1.
NO_TIME = int(np.iinfo(np.int64).min)

#: Per-step columns (ns) added to a rank's step table by classify; see the module docstring.
GPU_STEP_COLUMNS: tuple[str, ...] = (
    "gpu_prev_step",  # the previous step number in the trace (-1 for the first)
    "gpu_first_ns",  # start of the step's first GPU event (NO_TIME when it launched none)
    "gpu_last_ns",  # end of its last GPU event (NO_TIME when none)
    "gpu_busy_ns",  # union of its kernels, memcpys and memsets
    "gpu_compute_ns",  # union of its compute kernels
    "gpu_comm_ns",  # union of its communication kernels
    "gpu_overlap_ns",  # communication union intersected with the compute union
    "gpu_pair_busy_ns",  # the same four measures over this step's and the previous step's events
    "gpu_pair_compute_ns",
    "gpu_pair_comm_ns",
    "gpu_pair_overlap_ns",
    "gpu_compute_sum_ns",  # plain sums of durations per kernel type (HTA's kernel breakdown)
    "gpu_memory_sum_ns",
    "gpu_comm_sum_ns",
)
_MEASURES = ("busy", "compute", "comm", "overlap")
_SUMS = (("compute", 0), ("memory", 1), ("comm", 2))

#: Device classes (indices of ``rules.DEVICE_TARGETS``) that count as GPU work.
COMPUTE, MEMCPY, COMM = 0, 1, 2


def union_ns(start: I64, end: I64) -> int:
    """Total length of the union of intervals ``[start, end)`` (ns)."""
    if start.shape[0] == 0:
        return 0
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    # An interval opens a new merged block when it starts after everything before it ended.
    new = np.ones(s.shape[0], dtype=np.bool_)
    new[1:] = s[1:] > reach[:-1]
    block = np.cumsum(new) - 1
    block_start = s[new]
    block_end = block_start.copy()  # not zeros: times may be negative
    np.maximum.at(block_end, block, e)
    return int((block_end - block_start).sum())


def _measures(start: I64, end: I64, cls: npt.NDArray[np.int8]) -> tuple[int, int, int, int]:
    """(busy, compute, comm, overlap) ns of one set of GPU events."""
    busy = union_ns(start, end)
    c, p = cls == COMM, cls == COMPUTE
    comm = union_ns(start[c], end[c])
    compute = union_ns(start[p], end[p])
    both = union_ns(start[c | p], end[c | p])
    return busy, compute, comm, comm + compute - both


def grouped_union_ns(start: I64, end: I64, group: I64, n: int) -> I64:
    """Per group 0..n-1, the length of the union of its intervals ``[start, end)`` (ns).

    One sweep for all groups: the interval ends as +1/-1 marks sorted by (group, time), their
    running sum is each group's coverage (every group's marks sum to zero, so one cumulative
    sum serves them all), and a group's union is the time between its consecutive marks
    where coverage is positive. Equal to :func:`union_ns` per group (an end before its start
    covers nothing there either), without a numpy call per step."""
    out = np.zeros(n, dtype=np.int64)
    if start.shape[0] == 0:
        return out
    end = np.maximum(end, start)
    t = np.concatenate([start, end])
    g = np.concatenate([group, group])
    d = np.concatenate([np.ones(len(start), np.int64), np.full(len(start), -1, np.int64)])
    order = np.lexsort((t, g))
    t, g, d = t[order], g[order], d[order]
    cover = np.cumsum(d)[:-1]
    same = g[1:] == g[:-1]
    step = np.where(same & (cover > 0), t[1:] - t[:-1], 0)
    np.add.at(out, g[:-1], step)
    return out


def gpu_step_measures(
    start: I64,
    end: I64,
    cls: npt.NDArray[np.int8],
    step_of: I64,
    numbers: I64,
) -> Table:
    """:data:`GPU_STEP_COLUMNS` for each step (one row per entry of ``numbers``, in order).

    ``start``/``end``/``cls``/``step_of``: the GPU work events (class compute, memcpy or
    communication) and the index of the step that launched each (-1: outside every step).
    Each measure is one grouped pass over the events (a step's pair group holds its own and
    the previous step's events), so a trace of a million short steps costs what one of a few
    long ones does.
    """
    n = numbers.shape[0]
    cols = {c: np.full(n, NO_TIME if c in ("gpu_first_ns", "gpu_last_ns") else 0, dtype=np.int64)
            for c in GPU_STEP_COLUMNS}  # fmt: skip
    cols["gpu_prev_step"] = np.concatenate([[-1], numbers[:-1]]).astype(np.int64)
    keep = (step_of >= 0) & (step_of < n)
    start, end, cls = start[keep].astype(np.int64), end[keep].astype(np.int64), cls[keep]
    step_of = step_of[keep].astype(np.int64)
    has = np.bincount(step_of, minlength=n)[:n] > 0
    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(first, step_of, start)
    np.maximum.at(last, step_of, end)
    cols["gpu_first_ns"][has] = first[has]
    cols["gpu_last_ns"][has] = last[has]
    # Pair group k: the events of steps k - 1 and k.
    later = step_of + 1 < n
    p_start = np.concatenate([start, start[later]])
    p_end = np.concatenate([end, end[later]])
    p_cls = np.concatenate([cls, cls[later]])
    p_group = np.concatenate([step_of, step_of[later] + 1])
    for prefix, (s0, e0, c0, g0) in (
        ("gpu_", (start, end, cls, step_of)),
        ("gpu_pair_", (p_start, p_end, p_cls, p_group)),
    ):
        c, p = c0 == COMM, c0 == COMPUTE
        busy = grouped_union_ns(s0, e0, g0, n)
        comm = grouped_union_ns(s0[c], e0[c], g0[c], n)
        compute = grouped_union_ns(s0[p], e0[p], g0[p], n)
        both = grouped_union_ns(s0[c | p], e0[c | p], g0[c | p], n)
        measures = (busy, compute, comm, comm + compute - both)
        for name, v in zip(_MEASURES, measures, strict=True):
            cols[f"{prefix}{name}_ns"] = v
    dur = end - start
    for name, k in _SUMS:
        total = np.zeros(n, dtype=np.int64)
        on = cls == k
        np.add.at(total, step_of[on], dur[on])
        cols[f"gpu_{name}_sum_ns"] = total
    return Table(cols)


def add_gpu_columns(
    steps: Table,
    trace: RankTrace,
    win: StepWindows,
    launched: I64,
    dev_class: npt.NDArray[np.int8],
    work: I64,
) -> None:
    """Add :data:`GPU_STEP_COLUMNS` to a rank's step table (rows in ``win`` order), in place.

    ``work``: indices of the GPU work events; ``dev_class``: every event's device class;
    ``launched``: every event's launch time (:func:`~tracescale.ingest.steps.launch_times`).
    """
    ev = trace.events
    step_of = launch_step(trace, win.host_start, win.host_end, launched)[work]
    ends = ev.start[work] + ev.dur[work]
    gpu = gpu_step_measures(ev.start[work], ends, dev_class[work], step_of, win.numbers)
    for col in GPU_STEP_COLUMNS:
        steps[col] = gpu[col].to_numpy()


@dataclass(frozen=True)
class GpuTotals:
    """Interval measures (ns) of one rank over its analyzed steps; they add over executions.

    ``*_sum_ns`` are plain sums of event durations per kernel type (overlaps counted twice).
    """

    span_ns: int
    busy_ns: int
    compute_ns: int
    comm_ns: int
    overlap_ns: int
    compute_sum_ns: int = 0
    memory_sum_ns: int = 0
    comm_sum_ns: int = 0

    def __add__(self, other: GpuTotals) -> GpuTotals:
        return GpuTotals(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def seconds(self) -> dict[str, float]:
        """The measures in seconds, keyed without the ``_ns`` suffix (the study JSON's form)."""
        return {k.removesuffix("_ns"): v / 1e9 for k, v in asdict(self).items()}

    @property
    def idle_pct(self) -> float | None:
        """HTA's idle share, or None when the rank ran no GPU work."""
        if self.span_ns <= 0:
            return None
        return 100.0 * (self.span_ns - self.busy_ns) / self.span_ns

    @property
    def overlap_pct(self) -> float | None:
        """HTA's communication/computation overlap, or None without communication kernels."""
        if self.comm_ns <= 0:
            return None
        return 100.0 * self.overlap_ns / self.comm_ns


def rank_gpu_totals(steps: Table) -> GpuTotals | None:
    """The measures of the steps in ``steps`` (a rank's kept step rows), or None without them."""
    steps = as_table(steps)
    if "gpu_busy_ns" not in steps.columns or steps.empty:
        return None
    has = steps["gpu_first_ns"] != NO_TIME
    if not has.any():
        return GpuTotals(0, 0, 0, 0, 0)
    span = int(steps.col("gpu_last_ns")[has].max()) - int(steps.col("gpu_first_ns")[has].min())
    step = steps["step"].to_numpy(dtype=np.int64)
    prev = steps["gpu_prev_step"].to_numpy(dtype=np.int64)
    # A step whose previous step was kept: the union over the pair replaces the two steps'
    # own measures (what the gap between them adds). Where a step appears twice the later
    # row's measures count, as a lookup by step number would give.
    paired = (prev >= 0) & np.isin(prev, step)
    uniq, first_from_end = np.unique(step[::-1], return_index=True)
    last_row = len(step) - 1 - first_from_end  # per step number, its last row
    before_row = last_row[np.searchsorted(uniq, prev[paired])]
    this_row = last_row[np.searchsorted(uniq, step[paired])]
    totals = {}
    for m in _MEASURES:
        own = steps[f"gpu_{m}_ns"].to_numpy(dtype=np.int64)
        pair = steps[f"gpu_pair_{m}_ns"].to_numpy(dtype=np.int64)[paired]
        totals[m] = int(own.sum()) + int((pair - own[before_row] - own[this_row]).sum())
    sums = [int(steps[f"gpu_{name}_sum_ns"].sum()) for name, _ in _SUMS]
    return GpuTotals(span, *(totals[m] for m in _MEASURES), *sums)


def per_rank_frame(rows: Sequence[tuple[int, GpuTotals]]) -> Table:
    """One row per rank (executions of the same rank summed): ``rank``, ``gpu_idle_pct``,
    ``comm_comp_overlap_pct`` (percent, None where undefined) and ``totals`` (GpuTotals)."""
    by_rank: dict[int, GpuTotals] = {}
    for rank, totals in rows:
        by_rank[rank] = by_rank[rank] + totals if rank in by_rank else totals
    ordered = sorted(by_rank.items())
    column = np.empty(len(ordered), dtype=object)
    column[:] = [t for _, t in ordered]
    return Table(
        {
            "rank": np.array([r for r, _ in ordered], dtype=np.int64),
            "gpu_idle_pct": _percent([t.idle_pct for _, t in ordered]),
            "comm_comp_overlap_pct": _percent([t.overlap_pct for _, t in ordered]),
            "totals": column,
        }
    )


def _percent(values: list[float | None]) -> np.ndarray:
    """A percent column as a frame would type it: floats with NaN for None, or all None."""
    if all(v is None for v in values):
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)
