"""Per-rank results -> runs, and a merged run -> its entry in the document.

Which results form each run's executions (the ``--steps`` selection applied, successive
profiling windows of one rank pooled, overlapping duplicates refused), and the run entry of
the contract (seconds, per-step rows) that every report number is reproduced from.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from tracescale.categories import CATEGORIES
from tracescale.classify.rank import RankResult
from tracescale.classify.result import STEP_COLUMNS, RunBreakdown
from tracescale.classify.stragglers import find_stragglers
from tracescale.classify.top_ops import recompute_seconds, run_top_ops
from tracescale.errors import InvalidTraceError, UsageError
from tracescale.groups import group_codes, group_mean, series_mean
from tracescale.ingest.discover import RunSpec
from tracescale.ingest.group import pooled_windows_note
from tracescale.parallel.tasks import TaskError
from tracescale.table import replace_tables, table_of

_ROW_COLUMNS = [c for c in STEP_COLUMNS if c != "start"]


def select_steps(result: RankResult, steps: slice | None) -> RankResult:
    """Keep the steps whose ProfilerStep number lies in ``steps`` (negatives: from the end)."""
    if steps is None:
        return result
    own = table_of(result, "steps")
    numbers = own.col("step")
    position = np.arange(len(numbers))
    keep = np.ones(len(numbers), dtype=bool)
    if steps.start is not None:
        start = int(steps.start)
        keep &= (numbers >= start) if start >= 0 else (position >= len(numbers) + start)
    if steps.stop is not None:
        stop = int(steps.stop)
        keep &= (numbers < stop) if stop >= 0 else (position < len(numbers) + stop)
    kept = own[keep]
    if kept.empty:
        have = f"#{numbers.min()}–#{numbers.max()}" if len(numbers) else "no ProfilerStep"
        raise UsageError(
            f"--steps {_slice_text(steps)} keeps none of this rank's steps ({have}); "
            "numbers are ProfilerStep numbers, as inspect shows them",
            path=result.path,
        )
    keep_numbers = list(set(kept.col("step").tolist()))
    coll = table_of(result, "collectives")
    coll = coll[np.isin(coll.col("step"), keep_numbers)]
    ops = table_of(result, "op_seconds")
    if len(ops):
        ops = ops[np.isin(ops.col("step"), keep_numbers)]
    out: RankResult = replace_tables(result, steps=kept, collectives=coll, op_seconds=ops)
    return out


def _slice_text(steps: slice) -> str:
    start = "" if steps.start is None else str(steps.start)
    stop = "" if steps.stop is None else str(steps.stop)
    return f"{start}:{stop}"


def _check_duplicate_ranks(results: list[RankResult], notes: list[str]) -> list[RankResult]:
    """One rank twice in a folder: successive profiling windows are pooled (with a note naming
    every file and the gap), overlaps are errors."""
    by_rank: dict[int, list[RankResult]] = {}
    for r in results:
        by_rank.setdefault(r.rank, []).append(r)
    out: list[RankResult] = []
    for rank, rs in sorted(by_rank.items()):
        if len(rs) == 1:
            out.append(rs[0])
            continue
        spans = sorted(
            (
                r.segments.first,
                r.segments.stop,
                r.path,
            )
            for r in rs
        )
        for (_s0, e0, p0), (s1, _e1, p1) in itertools.pairwise(spans):
            if s1 < e0:
                raise InvalidTraceError(
                    f"rank {rank} appears twice with overlapping time spans: {p0} and {p1}",
                    path=os.path.dirname(p0),
                )
        # Successive windows of one process (tb_plugin's worker0.<span> files): pool the steps.
        notes.append(pooled_windows_note(rank, [(p, s, e) for s, e, p in spans]))
        out.extend(rs)
    return out


def run_groups(
    spec: RunSpec,
    results: Mapping[str, RankResult | TaskError],
    steps: slice | None = None,
    strict: bool = False,
) -> tuple[list[list[RankResult]], list[str]]:
    """The map results of one run as its executions (groups whose collectives match), plus
    notes on the files skipped; ``strict`` makes a bad file an error instead."""
    notes = list(spec.warnings)
    groups: list[list[RankResult]] = []
    for group in spec.groups:
        ok: list[RankResult] = []
        for f in group.files:
            res = results[f.path]
            if isinstance(res, TaskError):
                if strict:
                    raise InvalidTraceError(res.message, path=res.path)
                notes.append(f"{res.path}: skipped: {res.message}")
                continue
            ok.append(select_steps(res, steps))
        if ok:
            groups.extend(_split_successive(_check_duplicate_ranks(ok, notes)))
    return groups, notes


def _split_successive(results: list[RankResult]) -> list[list[RankResult]]:
    """Pooled successive windows of the same rank become separate groups (matched separately)."""
    groups: list[list[RankResult]] = []
    for r in results:
        for g in groups:
            if all(x.rank != r.rank for x in g):
                g.append(r)
                break
        else:
            groups.append([r])
    return groups


def _f(x: Any) -> float | None:
    v = float(x)
    return v if math.isfinite(v) else None


def _rows(values: npt.NDArray[np.float64]) -> list[list[float | None]]:
    """Rows as lists of floats, None where not finite.

    A million steps are 19 million values, 670 MB as distinct Python floats. A column of few
    distinct values (a category that is zero in most steps, the rank) shares one float object
    per value; the others convert in C (``tolist``). Only the non-finite cells are walked in
    Python.
    """
    n = values.shape[0]
    if n < _SHARE_FROM:
        rows: list[list[float | None]] = values.tolist()
        for k in np.flatnonzero(~np.isfinite(values).all(axis=1)).tolist():
            rows[k] = [_f(v) for v in rows[k]]
        return rows
    cells = np.empty(values.shape, dtype=object)
    for j, column in enumerate(values.T):
        distinct, which = np.unique(column, return_inverse=True)
        if len(distinct) <= n // 4:
            shared = np.empty(len(distinct), dtype=object)
            shared[:] = [_f(v) for v in distinct.tolist()]
            cells[:, j] = shared[which.ravel()]
        else:
            cells[:, j] = column.tolist()
            cells[~np.isfinite(column), j] = None
    shared_rows: list[list[float | None]] = cells.tolist()
    return shared_rows


#: Rows from which columns share their repeated values (below, ``tolist`` is cheaper).
_SHARE_FROM = 20_000


def step_rows(run: RunBreakdown) -> dict[str, Any]:
    """The run's per-step rows (``columns``, ``data``): the entry ``step_rows`` of the contract."""
    steps = table_of(run, "steps")
    return {
        "columns": _ROW_COLUMNS,
        "data": _rows(np.stack([steps.col(c).astype(np.float64) for c in _ROW_COLUMNS], axis=1)),
    }


def run_to_dict(run: RunBreakdown, *, rows: bool = True) -> dict[str, Any]:
    """A run's entry of the contract (seconds), including the per-step rows it came from.

    ``rows`` False leaves ``step_rows`` None for :func:`step_rows` to fill later: at a million
    steps the rows are the document's largest part, and the replay's peak need not hold them.
    """
    steps = table_of(run, "steps")
    # pandas' groupby means (Kahan-compensated, tracescale.groups), ranks and steps sorted
    codes, (rank_ids,) = group_codes(steps.col("rank"))
    n = len(rank_ids)
    means = {c: group_mean(codes, steps.col(c), n) for c in ("duration", *CATEGORIES)}
    breakdown = {c: series_mean(means[c]) for c in CATEGORIES}
    step_codes, (step_ids,) = group_codes(steps.col("step"))
    step_times = group_mean(step_codes, steps.col("duration"), len(step_ids))
    rank_overlap = group_mean(codes, steps.col("overlapped_communication"), n)
    rank_wait = group_mean(codes, steps.col("communication_wait"), n)
    per_rank_rows = np.stack([means[c] for c in ("duration", *CATEGORIES)], axis=1)
    hta = _hta_shares(run)
    return {
        "world_size": run.world_size,
        "ranks": list(run.ranks),
        "steps": int(np.bincount(codes).max()) if len(steps) else 0,
        "paths": list(run.paths),
        # a device the rules do not know stays "unknown"; "analyzed_as" says how it was read
        "kind": "unknown" if run.device == "unknown" else run.kind,
        "analyzed_as": run.kind,
        "device": run.device,
        "step_time_s": {
            "mean": series_mean(means["duration"]),
            "median": float(np.median(step_times)),
            "p10": float(np.percentile(step_times, 10)),
            "p90": float(np.percentile(step_times, 90)),
        },
        "breakdown_s": breakdown,
        "overlapped_communication_s": series_mean(rank_overlap),
        "communication_wait_s": series_mean(rank_wait),
        "communication_by_collective_s": dict(sorted(run.communication_by_collective.items())),
        "per_rank": [
            {
                "rank": int(rank),
                "step_time_s": float(row[0]),
                "breakdown_s": {c: float(v) for c, v in zip(CATEGORIES, row[1:], strict=False)},
                "communication_wait_s": float(wait),
                **hta.get(int(rank), {}),
            }
            for rank, row, wait in zip(
                rank_ids.tolist(),
                per_rank_rows.tolist(),
                rank_wait.tolist(),
                strict=False,
            )
        ],
        "step_times_s": [float(x) for x in step_times],
        "step_rows": step_rows(run) if rows else None,
        "clock_offsets_s": [
            {"execution": e, "rank": r, "offset_s": off, "scatter_s": sc}
            for e, r, off, sc in run.clock_offsets
        ],
        "top_ops": run_top_ops(table_of(run, "ops")),
        # activation checkpointing's forward run again (``recompute: `` top ops), all of it
        "recompute_s": recompute_seconds(table_of(run, "ops")),
        "stragglers": find_stragglers(steps),
        "warnings": list(run.warnings),
    }


def _hta_shares(run: RunBreakdown) -> dict[int, dict[str, Any]]:
    """Per rank: HTA-compatible ``gpu_idle_pct`` and ``comm_comp_overlap_pct`` (GPU runs) and
    the interval measures they come from (``gpu_time_s``; see classify/gpu_metrics.py)."""
    out: dict[int, dict[str, Any]] = {}
    table = table_of(run, "gpu_metrics")
    if not len(table):
        return out
    for rank, idle, overlap, totals in table.rows(
        ["rank", "gpu_idle_pct", "comm_comp_overlap_pct", "totals"]
    ):
        out[int(rank)] = {
            "gpu_idle_pct": _pct(idle),
            "comm_comp_overlap_pct": _pct(overlap),
            "gpu_time_s": totals.seconds(),
        }
    return out


def _pct(x: Any) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)
