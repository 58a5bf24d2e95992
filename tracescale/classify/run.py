"""Cross-rank steps (the reduce side): match collectives, split transfer from wait, name the cause.

Works only on the compact per-rank results, never on events, so the parent of a 1,000-rank
analysis holds tables, not traces.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracescale.categories import CATEGORIES
from tracescale.classify.clocks import alignment_scatter, clock_offsets
from tracescale.classify.gpu_metrics import GpuTotals, per_rank_frame, rank_gpu_totals
from tracescale.classify.rank import RankResult
from tracescale.classify.result import CAUSED, COLLECTIVE_COLUMNS, STEP_COLUMNS, RunBreakdown
from tracescale.classify.single_rank import apply_single_rank
from tracescale.classify.timeline import CAT
from tracescale.classify.top_ops import run_op_table
from tracescale.classify.work_size import run_input_sizes
from tracescale.groups import group_codes, series_sum
from tracescale.table import Table, as_table, concat, table_of

_COMM = CAT["communication"]
#: The collective type of point-to-point send/recv (``classify.collectives``)
P2P = "sendrecv"
_ALIGN_THRESHOLD_NS = 200_000  # ranks on one host share a clock; beyond this, assume skew
# NCCL ends a collective on all members within microseconds; aligned ends scattering by more
# than this say the offset is not one number over the window.
_SCATTER_WARN_S = 1e-3


def _match(
    ranks: Sequence[RankResult],
) -> tuple[Table, dict[int, int], dict[int, float], list[str]]:
    """Join the ranks' instances on (process group, collective, seq): rows with transfer/wait,
    and offsets."""
    warnings: list[str] = []
    frames = [table_of(r, "collectives") for r in ranks if len(table_of(r, "collectives"))]
    if not frames:
        return Table(columns=[*COLLECTIVE_COLUMNS, "start_ns", "end_ns"]), {}, {}, warnings
    coll = concat(frames)
    if "pg" in coll:
        coll["pg"] = np.array(
            ["" if _missing(v) else str(v) for v in coll.col("pg").tolist()], object
        )
    else:
        coll["pg"] = ""
    rank = coll.col("rank")
    _, counts = np.unique(rank, return_counts=True)
    if len(np.unique(counts)) > 1:
        warnings.append(
            "ranks recorded different numbers of collectives "
            f"({counts.min()}-{counts.max()}); unmatched instances have no wait split"
        )
    key = ["pg", "collective", "seq"]
    # Clock offsets: collectives end together on all ranks, so align each rank on the median
    # difference of its instance ends to the first rank's (only when clearly skewed); ranks
    # sharing no instance with it are reached through the groups of ranks already aligned.
    ref_rank = int(rank.min())
    median = {r: int(v) for r, v in clock_offsets(coll, key, ref_rank, "end_ns").items()}
    offsets: dict[int, int] = {}
    for r in sorted(np.unique(rank).tolist()):
        off = median.get(int(r), 0)
        offsets[int(r)] = off if abs(off) > _ALIGN_THRESHOLD_NS else 0
    if any(offsets.values()):
        warnings.append("rank clocks differ; aligned on collective ends (they finish together)")
    shift = np.array([offsets[int(r)] for r in rank.tolist()], dtype=np.int64)
    astart = coll.col("start_ns") - shift
    coll["astart"] = astart
    duration = (coll.col("end_ns") - coll.col("start_ns")) / 1e9
    coll["duration"] = duration
    codes, uniq = group_codes(*(coll.col(k) for k in key))
    n = len(uniq[0])
    transfer = np.full(n, np.inf)
    np.minimum.at(transfer, codes, duration)
    latest = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(latest, codes, astart)
    # the rank of each instance's latest start (its first row where several tie)
    at_max = np.flatnonzero(astart == latest[codes])
    _, first = np.unique(codes[at_max], return_index=True)
    late_rank = np.empty(n, dtype=rank.dtype)
    late_rank[codes[at_max[first]]] = rank[at_max[first]]
    coll["transfer"] = transfer[codes]
    coll["late_rank"] = late_rank[codes]
    coll["late_astart"] = latest[codes]
    coll["wait"] = np.maximum(duration - transfer[codes], 0)
    # Point-to-point transfers end on their two peers only: a rank's sendrecv #k and another's
    # need not be one transfer, so they say nothing about the clocks' consistency.
    scatter = alignment_scatter(coll[coll.col("collective") != "sendrecv"], key, offsets)
    worst = max(scatter, key=lambda r: scatter[r], default=None)
    # Host-side (gloo) collectives end within a fraction of their transfer, not microseconds:
    # only a scatter that is also large against the transfers says the clocks disagree.
    typical = float(np.median(coll.col("transfer"))) if len(coll) else 0.0
    if worst is not None and scatter[worst] > max(_SCATTER_WARN_S, typical):
        warnings.append(
            f"rank clocks are not consistent: aligned on collective ends, rank {worst}'s still "
            f"scatter by {scatter[worst] * 1e3:.2f} ms (a drifting or stepped clock, or "
            "instances matched wrongly); waits read across ranks are uncertain by as much"
        )
    return coll, offsets, scatter, warnings


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and value != value)


@dataclass(frozen=True)
class Wait:
    """A rank's exposed `communication` spent waiting in one collective instance for a late
    rank: the instants (ns, this rank's clock) the cause step gives the late rank's categories."""

    rank: int
    step: int
    collective: str
    seq: int
    late_rank: int
    shift_ns: int  # add to this rank's times to read the late rank's clock
    pieces: tuple[tuple[int, int], ...]


def exposed_waits(
    ranks: Sequence[RankResult], coll: Table, offsets: dict[int, int]
) -> Iterator[Wait]:
    """Each waiting instance's exposed pieces, every instant counted once per rank.

    Concurrent instances (gloo runs several buckets at once) wait over the same interval: each
    instant of wait is counted once, or the wait exceeds the step (seen on real CPU DDP traces).

    Point-to-point send/recv (``sendrecv``: a pipeline's stages) never wait here: they are no
    collective instance. A group's k-th p2p on two ranks is rarely one transfer (in 1F1B, stage
    s sends forward k while stage s+1 sends backward j), and an eager send ends without its
    recv, so the shortest duration is no transfer; their time stays ``communication``, as the
    serial fraction's ``pipeline_bubble`` (carved out of communication) reads it. Paired by
    sequence, a 4-stage pipeline's breakdown gave 2.7-8.3% of the step of its bubble to compute.
    """
    by_rank = {r.rank: r for r in ranks}
    coll = as_table(coll)
    ok = (coll.col("wait") > 0) & (coll.col("rank") != coll.col("late_rank"))
    ok &= coll.col("collective") != P2P
    waiting = coll[ok]
    order = np.lexsort((waiting.col("start_ns"), waiting.col("rank")))
    claimed_until: dict[int, int] = {}
    for row in _records(waiting.take(order)):
        me = by_rank[int(row.rank)]
        # Earlier rows of this rank start no later, so what they claimed ends at claimed_until.
        lo = max(int(row.start_ns), claimed_until.get(me.rank, int(row.start_ns)))
        hi = int(row.start_ns) + round(row.wait * 1e9)
        if hi <= lo:
            continue
        claimed_until[me.rank] = hi
        exposed = me.segments.pieces(lo, hi, _COMM)
        if exposed:
            late = int(row.late_rank)
            yield Wait(
                rank=me.rank,
                step=int(row.step),
                collective=str(row.collective),
                seq=int(row.seq),
                late_rank=late,
                shift_ns=offsets.get(late, 0) - offsets.get(me.rank, 0),
                pieces=tuple(exposed),
            )


def _records(table: Table) -> list[Any]:
    """The rows as named tuples (``itertuples(index=False)``)."""
    row = namedtuple("row", table.columns, rename=True)  # type: ignore[misc]
    return [row(*values) for values in table.rows()]


def group_waits(group: Sequence[RankResult]) -> list[Wait]:
    """The waits of one execution's ranks (after :func:`apply_single_rank`), as the cause step
    sees them: for tools that show the attribution instant by instant (``annotate``)."""
    coll, offsets, _, _ = _match(group)
    return list(exposed_waits(group, coll, offsets)) if len(coll) else []


def _cause(
    ranks: Sequence[RankResult], coll: Table, offsets: dict[int, int]
) -> tuple[dict[tuple[int, int], np.ndarray], dict[tuple[int, int], float], dict[str, float]]:
    """Per (rank, step): seconds moved out of `communication` into the late rank's categories,
    the exposed wait (seconds of the rank's `communication` spent waiting for a late rank), and
    per collective type the seconds moved (so by-collective times match the breakdown)."""
    by_rank = {r.rank: r for r in ranks}
    by_type: dict[str, float] = {}  # seconds of waiting per collective type given a cause
    moves: dict[tuple[int, int], np.ndarray] = {}
    waits: dict[tuple[int, int], float] = {}
    for w in exposed_waits(ranks, coll, offsets):
        key = (w.rank, w.step)
        waits[key] = waits.get(key, 0.0) + sum(b - a for a, b in w.pieces) / 1e9
        late = by_rank.get(w.late_rank)
        if late is None:
            continue
        moved = np.zeros(len(CATEGORIES))
        for a, b in w.pieces:
            there = late.segments.time_in(a + w.shift_ns, b + w.shift_ns)
            total = there.sum()
            if total <= 0:
                continue
            # What the late rank did while this one waited; its own waiting stays communication.
            moved += there / total * ((b - a) / 1e9)
        moved[_COMM] = 0.0
        if moved.sum() > 0:
            moves[key] = moves.get(key, np.zeros(len(CATEGORIES))) + moved
            by_type[w.collective] = by_type.get(w.collective, 0.0) + moved.sum()
    return moves, waits, by_type


def build_run(
    world_size: int,
    groups: Sequence[Sequence[RankResult]],
    paths: Sequence[str],
    warnings: Sequence[str] = (),
) -> RunBreakdown:
    """Merge the ranks of each execution (group) of one world size into a RunBreakdown."""
    step_frames: list[Table] = []
    coll_frames: list[Table] = []
    notes = list(warnings)
    by_type: dict[str, float] = {}
    nsteps = 0
    kinds = set()
    devices: dict[str, int] = {}  # family -> ranks
    unknown: dict[str, None] = {}
    op_tables: list[Table] = []
    size_tables: list[Table] = []
    gpu_rows: list[tuple[int, GpuTotals]] = []
    own_totals: list[np.ndarray] = []  # category seconds on each rank's own timeline
    clocks: list[tuple[int, int, float, float | None]] = []
    for execution, raw_group in enumerate(groups):
        group, found = apply_single_rank(raw_group)
        notes.extend(found)
        coll, offsets, scatter, w = _match(group)
        notes.extend(w)
        clocks.extend(
            (execution, rank, off / 1e9, scatter.get(rank)) for rank, off in sorted(offsets.items())
        )
        moves, waits, moved_by_type = _cause(group, coll, offsets) if len(coll) else ({}, {}, {})
        for r in group:
            kinds.add(r.kind)
            devices[r.device] = devices.get(r.device, 0) + 1
            unknown.update(dict.fromkeys(r.unknown_devices))
            notes.extend(f"{r.path}: {m}" for m in r.warnings)
            own = table_of(r, "steps")
            totals = rank_gpu_totals(own)
            if totals is not None:
                gpu_rows.append((r.rank, totals))
            steps = own.copy()
            numbers = steps.col("step").tolist()
            steps["communication_wait"] = np.array(
                [waits.get((r.rank, int(k)), 0.0) for k in numbers], dtype=np.float64
            )
            values = np.stack([steps.col(c).astype(np.float64) for c in CATEGORIES], axis=1)
            caused = np.zeros_like(values)
            for j, step in enumerate(numbers):
                mv = moves.get((r.rank, int(step)))
                if mv is None or mv.sum() <= 0:
                    continue
                take = min(float(mv.sum()), float(values[j, _COMM]))
                if take <= 0:
                    continue
                values[j, _COMM] -= take
                caused[j] = mv * (take / float(mv.sum()))
                values[j] += caused[j]
            for j, c in enumerate(CATEGORIES):
                steps[c] = values[:, j].copy()
            for c in CAUSED:
                steps[f"caused_{c}"] = caused[:, CAT[c]].copy()
            step_frames.append(steps)
            for ctype, sec in r.comm_by_type.items():
                by_type[ctype] = by_type.get(ctype, 0.0) + sec
            nsteps += len(steps)
            op_tables.append(table_of(r, "op_seconds"))
            size_tables.append(table_of(r, "input_sizes"))
            own_totals.append(np.array([series_sum(own.col(c)) for c in CATEGORIES]))
        for ctype, sec in moved_by_type.items():
            by_type[ctype] = max(by_type.get(ctype, 0.0) - sec, 0.0)
        if len(coll):
            origin = int(coll.col("start_ns").min())
            out = coll.assign(start=(coll.col("start_ns") - origin) / 1e9)
            coll_frames.append(out[list(COLLECTIVE_COLUMNS)])
    steps_df = concat(step_frames, columns=list(STEP_COLUMNS))
    coll_df = concat(coll_frames) if coll_frames else Table(columns=list(COLLECTIVE_COLUMNS))
    ranks = tuple(sorted({int(x) for x in steps_df.col("rank").tolist()}))
    kind = "gpu" if "gpu" in kinds else "cpu"
    if unknown:
        notes.append(unknown_device_note(tuple(unknown), devices.get("unknown", 0), kind))
    per_step = {k: float(v) / max(nsteps, 1) for k, v in by_type.items()}
    return RunBreakdown(
        world_size=world_size,
        ranks=ranks,
        paths=tuple(paths),
        steps=steps_df,
        collectives=coll_df,
        communication_by_collective=per_step,
        kind=kind,
        device=run_device(devices),
        warnings=tuple(dict.fromkeys(notes)),
        ops=run_op_table(op_tables, nsteps, _per_step(own_totals, nsteps)),
        input_sizes=run_input_sizes(size_tables),
        gpu_metrics=per_rank_frame(gpu_rows),
        clock_offsets=tuple(clocks),
    )


def run_device(devices: dict[str, int]) -> str:
    """A run's accelerator family: its ranks' one family, ``unknown`` if any rank's is, else
    the families joined (``cuda,gpu``: some ranks' traces lack the runtime calls)."""
    if "unknown" in devices:
        return "unknown"
    return ",".join(sorted(devices)) if devices else "cpu"


def unknown_device_note(unknown: tuple[str, ...], ranks: int, kind: str) -> str:
    """The run's one warning about device kinds the rules do not know (never one per event or
    per rank): what was not recognised and what the numbers then count."""
    what = ", ".join(unknown)
    if kind == "gpu":
        counted = (
            "its kernel, gpu_memcpy and gpu_memset events are analyzed as device work as on "
            "CUDA; other device events are not counted"
        )
    else:
        counted = (
            "none of its events is counted as device work; the run is analyzed from its host "
            "threads alone"
        )
    plural = "rank" if ranks == 1 else "ranks"
    where = f"{ranks} {plural}"
    return f'unknown device kind ({what}) on {where}: {counted} (kind "unknown" in the JSON)'


def _per_step(totals: list[np.ndarray], nsteps: int) -> dict[str, float]:
    """Category seconds summed over ranks and steps -> mean per rank-step (the ranks added
    one after another, as a frame's row sum does)."""
    if not totals or nsteps <= 0:
        return {}
    summed = np.stack(totals).sum(axis=0)
    return {c: float(v) / nsteps for c, v in zip(CATEGORIES, summed.tolist(), strict=True)}
