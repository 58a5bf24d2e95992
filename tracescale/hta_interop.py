"""Holistic Trace Analysis (HTA) interop: a :class:`~tracescale.study.Study` from loaded HTA traces.

HTA users already hold their traces as one pandas frame per rank
(``hta.trace_analysis.TraceAnalysis``); :func:`from_hta` turns those frames into tracescale's
columnar :class:`~tracescale.ingest.trace.RankTrace` (µs -> int64 ns) and runs the same
classify -> per-run merge -> scaling -> document path as ``tracescale analyze``, so serial
fractions and projections come without re-parsing a single file. :func:`to_hta_frames` goes
the other way: a study's breakdown in the column names of HTA's temporal and idle-time
breakdowns.

This is the only module that touches HTA (the ``hta`` extra, package ``traceinsight``, import
name ``hta``), and it never imports it: it reads the documented attributes of the objects it is
given (``analysis.t`` is a ``hta.common.trace.Trace`` with ``get_ranks()``, ``get_trace(rank)``,
``symbol_table.sym_table``, ``meta_data``, ``trace_files`` and ``min_ts``).

What HTA's loader drops, tracescale does not see. By default ``TraceAnalysis`` drops the
**last** ProfilerStep (``include_last_profiler_step=False``) and every GPU kernel not launched
from a kept CPU event, plus ``python_function`` and ``gpu_user_annotation`` events; HTA also
rounds ``ts`` to whole µs. On the kept steps the breakdown equals ``tracescale analyze``'s on
the same files (``analyze(path, steps=":-1")`` for the default loader), up to that rounding.

Category mapping (:data:`HTA_CATEGORY_MAP`), for GPU runs:

============== ========================= ===================== ===================
tracescale     HTA temporal breakdown    HTA idle category     HTA kernel type
============== ========================= ===================== ===================
compute        ``compute_time``          --                    ``COMPUTATION``
memcpy         ``non_compute_time``      --                    ``MEMORY``
communication  ``non_compute_time``      --                    ``COMMUNICATION``
dataloader     ``idle_time``             ``host_wait``         --
sync           ``idle_time``             ``host_wait``         --
reduction      ``idle_time``             ``host_wait``         --
host           ``idle_time``             ``host_wait``         --
idle           ``idle_time``             ``other``             --
============== ========================= ===================== ===================

HTA's third idle category, ``kernel_wait`` (gaps shorter than ~30 ns between back-to-back
kernels), is inside tracescale's ``compute`` interval union and is never reported separately.
Exposed communication is ``non_compute_time`` in HTA; tracescale splits it further (transfer vs
waiting for a late rank, whose wait it moves to the late rank's category). HTA's denominator
``kernel_time`` is the span from the first to the last kernel; tracescale's is the sum of the
step windows, so the shares differ by the time outside steps.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pandas as pd

from tracescale.categories import CATEGORIES
from tracescale.classify.rank import RankResult, classify_rank
from tracescale.classify.rules import load_rules
from tracescale.errors import InvalidTraceError, NoTracesError, TracescaleError, UsageError
from tracescale.ingest.discover import RankFile, RunGroup, RunSpec, StudySpec, pool_repeats
from tracescale.ingest.trace import DEVICE_CATEGORIES, EventColumns, PGConfig, RankTrace, TraceMeta
from tracescale.parallel.tasks import TaskError
from tracescale.study import Study, make_document

__all__ = [
    "HTA_CATEGORY_MAP",
    "HTA_IDLE_CATEGORIES",
    "HTA_KERNEL_TYPES",
    "HTA_TEMPORAL",
    "from_hta",
    "hta_trace_to_rank_trace",
    "to_hta_frames",
]

#: tracescale category -> HTA temporal-breakdown column stem (``get_temporal_breakdown``).
HTA_TEMPORAL: Final[dict[str, str]] = {
    "compute": "compute_time",
    "memcpy": "non_compute_time",
    "communication": "non_compute_time",
    "dataloader": "idle_time",
    "sync": "idle_time",
    "reduction": "idle_time",
    "host": "idle_time",
    "idle": "idle_time",
}

#: tracescale category -> HTA ``idle_category`` (``get_idle_time_breakdown``); GPU-busy ones: None.
HTA_IDLE_CATEGORIES: Final[dict[str, str | None]] = {
    "compute": None,
    "memcpy": None,
    "communication": None,
    "dataloader": "host_wait",
    "sync": "host_wait",
    "reduction": "host_wait",
    "host": "host_wait",
    "idle": "other",
}

#: tracescale category -> HTA ``kernel_type`` (``get_gpu_kernel_breakdown``); GPU-idle ones: None.
HTA_KERNEL_TYPES: Final[dict[str, str | None]] = {
    "compute": "COMPUTATION",
    "memcpy": "MEMORY",
    "communication": "COMMUNICATION",
    "dataloader": None,
    "sync": None,
    "reduction": None,
    "host": None,
    "idle": None,
}

#: The whole mapping, one row per tracescale category (the table in the module docstring).
HTA_CATEGORY_MAP: Final[dict[str, dict[str, str | None]]] = {
    c: {
        "temporal": HTA_TEMPORAL[c],
        "idle_category": HTA_IDLE_CATEGORIES[c],
        "kernel_type": HTA_KERNEL_TYPES[c],
    }
    for c in CATEGORIES
}

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_HTA_HINT = "pass hta.trace_analysis.TraceAnalysis objects (or their .t Trace)"


# --------------------------------------------------------------------------------------------
# HTA frame -> RankTrace


def _trace_of(analysis: Any) -> Any:
    """The ``hta.common.trace.Trace`` of a TraceAnalysis (or the Trace itself)."""
    t = getattr(analysis, "t", analysis)
    for attr in ("get_ranks", "get_trace", "symbol_table"):
        if not hasattr(t, attr):
            raise UsageError(f"from_hta: {type(analysis).__name__} has no {attr!r}; {_HTA_HINT}")
    return t


def _ids(values: pd.Series, labels: dict[str, int]) -> npt.NDArray[np.int64]:
    """pid/tid as tracescale's ingest has them: ints, numeric strings as ints, labels negative."""
    if pd.api.types.is_integer_dtype(values.dtype):
        ints: npt.NDArray[np.int64] = values.to_numpy(dtype=np.int64)
        return ints
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    mapped = np.empty(len(uniques), dtype=np.int64)
    for k, v in enumerate(uniques.tolist()):
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            mapped[k] = int(v) if _I64_MIN <= int(v) <= _I64_MAX else 0
        elif (isinstance(v, float) and v.is_integer()) or (
            isinstance(v, str) and v.isascii() and v.isdigit() and len(v) < 19
        ):
            mapped[k] = int(v)
        else:
            got = labels.get(str(v))
            if got is None:
                got = labels[str(v)] = -(len(labels) + 1)
            mapped[k] = got
    return mapped[codes] if len(codes) else np.zeros(0, dtype=np.int64)


def _int_col(df: pd.DataFrame, name: str, *, positive: bool = False) -> npt.NDArray[np.int64]:
    """An int64 column, -1 where absent; ``positive``: HTA's 0 defaults also become -1."""
    n = len(df)
    if name not in df.columns:
        return np.full(n, -1, dtype=np.int64)
    col = pd.to_numeric(df[name], errors="coerce").fillna(-1).to_numpy(dtype=np.float64)
    out = np.where(np.isfinite(col), col, -1).astype(np.int64)
    # HTA reads 32-bit stream ids into small ints; Kineto's uint32 -1 is -1 here either way.
    out[out == 4294967295] = -1
    if positive:
        out[out <= 0] = -1
    return out


def _text_col(df: pd.DataFrame, name: str) -> list[str]:
    """A string arg column; HTA's missing markers ('' and '-1') become ''."""
    if name not in df.columns:
        return [""] * len(df)
    out: list[str] = []
    for v in df[name].tolist():
        if v is None or (isinstance(v, float) and v != v):
            out.append("")
        elif isinstance(v, str):
            out.append("" if v in ("", "-1") else v)
        elif isinstance(v, (list, tuple, dict)):
            out.append(json.dumps(v, separators=(",", ":")))
        else:
            s = str(v)
            out.append("" if s == "-1" else s)
    return out


def _symbols(t: Any, df: pd.DataFrame, col: str) -> npt.NDArray[np.object_]:
    """Decoded ``cat``/``name`` strings (HTA stores ids into ``t.symbol_table.sym_table``)."""
    values = df[col]
    if pd.api.types.is_integer_dtype(values.dtype):
        table = np.asarray([*t.symbol_table.sym_table, ""], dtype=object)
        ids = values.to_numpy(dtype=np.int64)
        ids = np.where((ids >= 0) & (ids < len(table) - 1), ids, len(table) - 1)
        return np.asarray(table[ids], dtype=object)
    return np.asarray(values.astype(str).to_numpy(), dtype=object)


def _time_ns(df: pd.DataFrame, min_ts: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Absolute start and duration in int64 ns from HTA's aligned µs ``ts`` and ``dur``."""
    ts = df["ts"].to_numpy()
    if np.issubdtype(ts.dtype, np.integer):
        start = (ts.astype(np.int64) + np.int64(min_ts)) * 1000
    else:
        tsf = ts.astype(np.float64)
        whole = np.floor(tsf)
        start = (whole.astype(np.int64) + np.int64(min_ts)) * 1000 + np.rint(
            (tsf - whole) * 1000
        ).astype(np.int64)
    dur = np.rint(df["dur"].to_numpy(dtype=np.float64) * 1000)
    return start.astype(np.int64), np.where(np.isfinite(dur), dur, -1).astype(np.int64)


def _meta(t: Any, rank: int, path: str, n: int, skipped: dict[str, int]) -> TraceMeta:
    raw = (getattr(t, "meta_data", None) or {}).get(rank) or {}
    dist = raw.get("distributedInfo") or {}
    pgs = tuple(
        PGConfig(
            name=str(pg.get("pg_name", "")),
            desc=str(pg.get("pg_desc", "")),
            backend=str(pg.get("backend_config", "")),
            size=int(pg.get("pg_size", -1)),
            ranks=tuple(int(r) for r in pg.get("ranks", [])),
        )
        for pg in dist.get("pg_config", []) or []
        if isinstance(pg, Mapping)
    )
    world = dist.get("world_size")
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    return TraceMeta(
        path=path,
        size_bytes=size,
        rank=rank,
        world_size=int(world) if isinstance(world, int) and world > 0 else None,
        backend=dist.get("backend") or None,
        pg_config=pgs,
        device_names=tuple(
            str(d.get("name", "")) for d in raw.get("deviceProperties", []) or [] if d
        ),
        schema_version=raw.get("schemaVersion"),
        base_time_ns=raw.get("baseTimeNanoseconds"),
        total_events=n,
        skipped=skipped,
    )


def hta_trace_to_rank_trace(analysis: Any, rank: int) -> RankTrace:
    """One rank of a loaded HTA trace as tracescale's :class:`RankTrace` (no file is read).

    ``ts``/``dur`` are µs (``ts`` aligned by HTA to ``Trace.min_ts``) -> absolute int64 ns;
    ``cat``/``name`` ids are decoded through HTA's symbol table; the collective args HTA parses
    by default (``collective_name``, ``in_msg_nelems``, ``out_msg_nelems``, ``group_size``,
    ``msg_dtype``, ``bytes``, ``Input Dims``/``Input type``) fill the matching columns, and
    ``seq``/``device`` when the user's ``ParserConfig`` added them.
    """
    t = _trace_of(analysis)
    df = t.get_trace(rank)
    path = str((getattr(t, "trace_files", None) or {}).get(rank, f"<hta rank {rank}>"))
    skipped: dict[str, int] = {}
    if "index" in df.columns:
        df = df.sort_values("index", kind="stable")
    start, dur = _time_ns(df, int(getattr(t, "min_ts", 0) or 0))
    bad = dur < 0
    if bad.any():
        skipped["events with negative or missing dur"] = int(bad.sum())
        keep = ~bad
        df, start, dur = df[keep], start[keep], dur[keep]
    n = len(df)
    labels: dict[str, int] = {}
    pid = _ids(df["pid"], labels)
    tid = _ids(df["tid"], labels)
    str_cols: list[Sequence[Any] | npt.NDArray[np.object_]] = [
        _symbols(t, df, "cat"),
        _symbols(t, df, "name"),
        _text_col(df, "collective_name"),
        _text_col(df, "msg_dtype"),
        _text_col(df, "input_dims"),
        _text_col(df, "input_type"),
    ]
    flat = np.empty(1 + n * len(str_cols), dtype=object)
    flat[0] = ""
    for k, col in enumerate(str_cols):
        flat[1 + k * n : 1 + (k + 1) * n] = list(col)
    codes, uniques = pd.factorize(flat)
    table = tuple(str(s) for s in uniques)
    c32 = codes[1:].astype(np.int32).reshape(len(str_cols), n)

    def opt(k: int) -> npt.NDArray[np.int32]:
        return np.where(c32[k] == 0, np.int32(-1), c32[k]).astype(np.int32)

    device_cats = np.array([s in DEVICE_CATEGORIES for s in table], dtype=np.bool_)
    seq_col = "seq" if "seq" in df.columns else "Seq"
    cols = EventColumns(
        start=start,
        dur=dur,
        pid=pid,
        tid=tid,
        cat=c32[0].copy(),
        name=c32[1].copy(),
        device=_int_col(df, "device"),
        stream=_int_col(df, "stream"),
        correlation=_int_col(df, "correlation"),
        external_id=_int_col(df, "external_id"),
        coll_name=opt(2),
        in_nelems=_int_col(df, "in_msg_nelems", positive=True),
        out_nelems=_int_col(df, "out_msg_nelems", positive=True),
        group_size=_int_col(df, "group_size", positive=True),
        dtype=opt(3),
        seq=_int_col(df, seq_col),
        nbytes=_int_col(df, "bytes"),
        wait_on_stream=_int_col(df, "wait_on_stream"),
        wait_on_corr=_int_col(df, "wait_on_cuda_event_record_corr_id"),
        input_dims=opt(4),
        input_type=opt(5),
        is_device=device_cats[c32[0]] if n else np.zeros(0, dtype=np.bool_),
    )
    cols = cols.take(np.argsort(cols.start, kind="stable"))
    return RankTrace(
        meta=_meta(t, rank, path, n, skipped),
        strings=table,
        events=cols,
        pid_names={v: k for k, v in labels.items()},
    )


# --------------------------------------------------------------------------------------------
# HTA analyses -> Study


def _run_spec(
    t: Any, ranks: list[int], keys: dict[int, str], world: int | None, label: str
) -> RunSpec:
    """World size as discovery decides it: distributedInfo, else the given one, else the ranks."""
    warnings: list[str] = []
    if world is None:
        sizes = set()
        for r in ranks:
            dist = ((getattr(t, "meta_data", None) or {}).get(r) or {}).get("distributedInfo")
            ws = (dist or {}).get("world_size")
            if isinstance(ws, int) and ws > 0:
                sizes.add(ws)
        if len(sizes) > 1:
            raise InvalidTraceError(
                f"ranks of one HTA trace report different world sizes {sorted(sizes)}", path=label
            )
        world = sizes.pop() if sizes else max(len(ranks), max(ranks) + 1)
    bad = [r for r in ranks if r >= world]
    if bad:
        raise InvalidTraceError(f"rank {bad[0]} is not below the world size {world}", path=label)
    missing = sorted(set(range(world)) - set(ranks))
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        warnings.append(f"{label}: {len(ranks)} of {world} ranks present; missing ranks {shown}")
    files = tuple(RankFile(keys[r], r, 0, "HTA") for r in ranks)
    return RunSpec(
        world_size=world,
        label=label,
        groups=(RunGroup(folder=label, files=files),),
        warnings=tuple(warnings),
    )


def from_hta(
    *analyses: Any,
    world_sizes: Sequence[int | None] | None = None,
    mode: str = "auto",
    project: Sequence[int] | None = None,
    what_if: Mapping[str, float] | None = None,
    assumptions: Mapping[str, str] | None = None,
    rules: str | None = None,
    steps: str | slice | None = None,
    strict: bool = False,
) -> Study:
    """A :class:`Study` from already loaded ``hta.trace_analysis.TraceAnalysis`` objects.

    One run per object; pass several for several world sizes (objects of the same world size
    are pooled as repeats, like run folders)::

        from hta.trace_analysis import TraceAnalysis
        runs = [TraceAnalysis(trace_dir=f"traces/ws{n}") for n in (1, 2, 4, 8)]
        study = tracescale.from_hta(*runs)
        study.scaling.serial_fraction

    ``world_sizes`` overrides the world size per object (default: ``distributedInfo``, else the
    number of ranks). The other options are :func:`tracescale.analyze`'s. HTA's loader drops the
    last ProfilerStep unless it was built with ``include_last_profiler_step=True``.
    """
    from tracescale.pipeline import analyze_study, parse_steps

    if not analyses:
        raise UsageError(f"from_hta needs at least one loaded trace; {_HTA_HINT}")
    if mode not in ("auto", "strong", "weak"):
        raise UsageError(f"--mode must be auto, strong or weak, not {mode!r}")
    if world_sizes is not None and len(world_sizes) != len(analyses):
        raise UsageError(
            f"world_sizes has {len(world_sizes)} entries for {len(analyses)} HTA traces"
        )
    rule_set = load_rules(rules)
    step_slice = parse_steps(steps) if isinstance(steps, str) or steps is None else steps
    results: dict[str, RankResult | TaskError] = {}
    by_ws: dict[int, list[RunSpec]] = {}
    folders: list[str] = []
    for i, analysis in enumerate(analyses):
        t = _trace_of(analysis)
        ranks = sorted(int(r) for r in t.get_ranks())
        folder = str(getattr(t, "trace_path", "") or f"<hta trace {i}>")
        folders.append(folder)
        if not ranks:
            raise NoTracesError("HTA trace has no ranks with analyzable events", path=folder)
        keys: dict[int, str] = {}
        for r in ranks:
            key = str((getattr(t, "trace_files", None) or {}).get(r, f"{folder}#rank{r}"))
            while key in results:
                key += f"#{i}"
            keys[r] = key
            try:
                results[key] = classify_rank(hta_trace_to_rank_trace(t, r), rule_set, rank=r)
            except TracescaleError as exc:
                results[key] = TaskError(key, exc.message, exc.exit_code)
        ws_given = world_sizes[i] if world_sizes is not None else None
        run = _run_spec(t, ranks, keys, ws_given, folder)
        by_ws.setdefault(run.world_size, []).append(run)
    runs = [pool_repeats(ws, by_ws[ws], "HTA traces") for ws in sorted(by_ws)]
    study_path = (
        os.path.commonpath(folders) if all(os.path.isabs(f) for f in folders) else folders[0]
    )
    spec = StudySpec(path=study_path, runs=tuple(runs))
    entry, run_breakdowns, scaling = analyze_study(
        spec,
        results,
        mode=mode,
        project=project,
        what_if=what_if,
        assumptions=assumptions,
        steps=step_slice,
        strict=strict,
    )
    return Study(
        doc=make_document([entry]),
        runs_by_study=(run_breakdowns,),
        scaling_by_study=(scaling,),
    )


# --------------------------------------------------------------------------------------------
# Study -> HTA-shaped frames


def to_hta_frames(study: Study) -> dict[str, pd.DataFrame]:
    """A study's breakdown in HTA's column names, µs summed over the analyzed steps per rank.

    Returns three frames, each with ``study`` and ``world_size`` in front of HTA's columns:

    - ``"temporal_breakdown"``: like ``TraceAnalysis.get_temporal_breakdown()``: ``rank``,
      ``idle_time(us)``, ``compute_time(us)``, ``non_compute_time(us)``, ``kernel_time(us)``
      and the three ``*_pctg`` columns (``kernel_time`` is the sum of the step windows);
    - ``"idle_time_breakdown"``: like ``get_idle_time_breakdown()`` without the per-stream
      split: ``rank``, ``idle_category`` (``host_wait``, ``kernel_wait``, ``other``),
      ``idle_time`` (µs), ``idle_time_ratio``;
    - ``"kernel_type_breakdown"``: like ``get_gpu_kernel_breakdown()``'s first frame:
      ``kernel_type``, ``sum`` (µs over all ranks), ``percentage``.

    The mapping is :data:`HTA_CATEGORY_MAP` (the table in this module's docstring).
    """
    long = study.breakdown()
    long = long.astype({"world_size": "int64", "rank": "int64"}).assign(
        seconds=pd.to_numeric(long["seconds"], errors="coerce").fillna(0.0)
    )
    keys = ["study", "world_size", "rank"]
    per_rank = (
        long.pivot_table(index=keys, columns="category", values="seconds", aggfunc="sum")
        .reindex(columns=list(CATEGORIES), fill_value=0.0)
        .fillna(0.0)
        * 1e6
    )
    temporal = pd.DataFrame(index=per_rank.index)
    for stem in ("idle_time", "compute_time", "non_compute_time"):
        cats = [c for c in CATEGORIES if HTA_TEMPORAL[c] == stem]
        temporal[f"{stem}(us)"] = per_rank[cats].sum(axis=1)
    temporal["kernel_time(us)"] = per_rank.sum(axis=1)
    total = temporal["kernel_time(us)"].where(temporal["kernel_time(us)"] > 0)
    for stem in ("idle_time", "compute_time", "non_compute_time"):
        temporal[f"{stem}_pctg"] = (100 * temporal[f"{stem}(us)"] / total).fillna(0.0).round(2)
    temporal = temporal.reset_index()

    idle_rows = []
    for (study_path, ws, rank), row in per_rank.iterrows():
        sums = {"host_wait": 0.0, "kernel_wait": 0.0, "other": 0.0}
        for c in CATEGORIES:
            cat = HTA_IDLE_CATEGORIES[c]
            if cat is not None:
                sums[cat] += float(row[c])
        idle_total = sum(sums.values())
        for cat, us in sums.items():
            ratio = us / idle_total if idle_total > 0 else 0.0
            idle_rows.append((study_path, ws, rank, cat, us, ratio))
    idle = pd.DataFrame(idle_rows, columns=[*keys, "idle_category", "idle_time", "idle_time_ratio"])

    kt_rows = []
    for (study_path, ws), grp in per_rank.groupby(level=[0, 1]):
        sums = {"COMMUNICATION": 0.0, "MEMORY": 0.0, "COMPUTATION": 0.0}
        for c in CATEGORIES:
            kt = HTA_KERNEL_TYPES[c]
            if kt is not None:
                sums[kt] += float(grp[c].sum())
        busy = sum(sums.values())
        for kt, us in sums.items():
            pct = round(100 * us / busy, 2) if busy > 0 else 0.0
            kt_rows.append((study_path, ws, kt, us, pct))
    kernel_types = pd.DataFrame(
        kt_rows, columns=["study", "world_size", "kernel_type", "sum", "percentage"]
    )
    return {
        "temporal_breakdown": temporal,
        "idle_time_breakdown": idle,
        "kernel_type_breakdown": kernel_types,
    }
