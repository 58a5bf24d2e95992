"""A study -> frames in the column names of HTA's temporal, idle-time and kernel-type breakdowns.

GPU ranks are exported from the HTA-compatible interval measures the study JSON keeps per rank
(``per_rank[].gpu_time_s``, see classify/gpu_metrics.py), so the figures are HTA's: the span
from the first to the last GPU event of the analyzed steps, idle = span - busy, compute = the
union of compute kernels. Tracescale's categories are *not* used for those numbers: cause
attribution moves a rank's wait for a late peer (time its GPU spent inside an NCCL kernel) to
the late rank's category, which answers "why", not "was this GPU busy". The categories only
split the idle time into HTA's idle categories. Ranks without the measures (CPU runs, study
files written before they existed) fall back to the category mapping of :mod:`.mapping`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from tracescale.categories import CATEGORIES
from tracescale.hta_interop.mapping import HTA_IDLE_CATEGORIES, HTA_KERNEL_TYPES, HTA_TEMPORAL
from tracescale.study import Study, rows_frame

_STEMS = ("idle_time", "compute_time", "non_compute_time")
_KEYS = ["study", "world_size", "rank"]
#: Host categories whose GPU-idle time HTA calls ``host_wait`` (the GPU waited for the CPU).
_HOST_WAIT = tuple(c for c in CATEGORIES if HTA_IDLE_CATEGORIES[c] == "host_wait")


def _category_us(run: dict[str, Any]) -> pd.DataFrame:
    """Per rank: µs per category over the analyzed steps, with cause attribution undone
    (``caused_<c>`` back to communication: on this rank the GPU ran the collective's kernel)."""
    rows = rows_frame(run)
    if rows.empty:
        return pd.DataFrame(columns=list(CATEGORIES))
    sums = rows.groupby("rank")[[c for c in rows.columns if c != "step"]].sum()
    out = sums.reindex(columns=list(CATEGORIES), fill_value=0.0).astype("float64")
    for c in CATEGORIES:
        caused = f"caused_{c}"
        if caused in sums.columns:
            moved = sums[caused].astype("float64")
            out[c] -= moved
            out["communication"] += moved
    return out.clip(lower=0.0) * 1e6


def _gpu_row(gpu: dict[str, float], cats: pd.Series) -> dict[str, float]:
    """Temporal and idle figures (µs) of one rank from its HTA-compatible measures."""
    span, busy = gpu.get("span", 0.0) * 1e6, gpu.get("busy", 0.0) * 1e6
    compute = gpu.get("compute", 0.0) * 1e6
    idle = max(span - busy, 0.0)
    host = float(sum(cats.get(c, 0.0) for c in _HOST_WAIT))
    other = float(cats.get("idle", 0.0))
    share = host / (host + other) if host + other > 0 else 0.0
    return {
        "idle_time(us)": idle,
        "compute_time(us)": compute,
        "non_compute_time(us)": max(busy - compute, 0.0),
        "kernel_time(us)": span,
        "host_wait": idle * share,
        "kernel_wait": 0.0,
        "other": idle * (1 - share),
    }


def _category_row(cats: pd.Series) -> dict[str, float]:
    """The same figures from the categories alone (ranks without GPU measures)."""
    out = {f"{stem}(us)": 0.0 for stem in _STEMS}
    idle = {"host_wait": 0.0, "kernel_wait": 0.0, "other": 0.0}
    for c in CATEGORIES:
        us = float(cats.get(c, 0.0))
        out[f"{HTA_TEMPORAL[c]}(us)"] += us
        cat = HTA_IDLE_CATEGORIES[c]
        if cat is not None:
            idle[cat] += us
    return {**out, "kernel_time(us)": sum(out.values()), **idle}


def to_hta_frames(study: Study) -> dict[str, pd.DataFrame]:
    """A study's per-rank figures in HTA's column names (µs over the analyzed steps).

    Returns three frames, each with ``study`` and ``world_size`` in front of HTA's columns:

    - ``"temporal_breakdown"``: like ``TraceAnalysis.get_temporal_breakdown()``: ``rank``,
      ``idle_time(us)``, ``compute_time(us)``, ``non_compute_time(us)``, ``kernel_time(us)``
      (the span from the first to the last GPU event) and the three ``*_pctg`` columns;
    - ``"idle_time_breakdown"``: like ``get_idle_time_breakdown()`` without the per-stream
      split: ``rank``, ``idle_category`` (``host_wait``, ``kernel_wait``, ``other``),
      ``idle_time`` (µs), ``idle_time_ratio``; the idle time is split in the proportion of
      tracescale's host categories (host_wait) to ``idle`` (other); ``kernel_wait`` (gaps
      between back-to-back kernels) is inside the busy union and stays 0;
    - ``"kernel_type_breakdown"``: like ``get_gpu_kernel_breakdown()``'s first frame:
      ``kernel_type``, ``sum`` (µs of kernel durations over all ranks), ``percentage``.
    """
    temporal_rows: list[dict[str, Any]] = []
    type_rows: list[tuple[str, int, str, float]] = []
    for entry in study.studies:
        path = str(entry.get("path", ""))
        for run in entry.get("runs", []):
            ws = int(run["world_size"])
            cats = _category_us(run)
            sums = {"COMMUNICATION": 0.0, "MEMORY": 0.0, "COMPUTATION": 0.0}
            for pr in run.get("per_rank", []):
                rank = int(pr["rank"])
                rank_cats = cats.loc[rank] if rank in cats.index else pd.Series(dtype="float64")
                gpu = pr.get("gpu_time_s")
                row = _gpu_row(gpu, rank_cats) if gpu else _category_row(rank_cats)
                temporal_rows.append({"study": path, "world_size": ws, "rank": rank, **row})
                if gpu:
                    sums["COMPUTATION"] += gpu.get("compute_sum", 0.0) * 1e6
                    sums["MEMORY"] += gpu.get("memory_sum", 0.0) * 1e6
                    sums["COMMUNICATION"] += gpu.get("comm_sum", 0.0) * 1e6
                else:
                    for c in CATEGORIES:
                        kt = HTA_KERNEL_TYPES[c]
                        if kt is not None:
                            sums[kt] += float(rank_cats.get(c, 0.0))
            type_rows.extend((path, ws, kt, us) for kt, us in sums.items())
    return {
        "temporal_breakdown": _temporal(temporal_rows),
        "idle_time_breakdown": _idle(temporal_rows),
        "kernel_type_breakdown": _kernel_types(type_rows),
    }


def _temporal(rows: list[dict[str, Any]]) -> pd.DataFrame:
    cols = [*_KEYS, *(f"{s}(us)" for s in _STEMS), "kernel_time(us)"]
    df = pd.DataFrame(rows, columns=[*cols, "host_wait", "kernel_wait", "other"])[cols]
    total = df["kernel_time(us)"].where(df["kernel_time(us)"] > 0)
    for stem in _STEMS:
        df[f"{stem}_pctg"] = (100 * df[f"{stem}(us)"] / total).fillna(0.0).round(2)
    return df


def _idle(rows: list[dict[str, Any]]) -> pd.DataFrame:
    out = []
    for r in rows:
        total = r["host_wait"] + r["kernel_wait"] + r["other"]
        for cat in ("host_wait", "kernel_wait", "other"):
            ratio = r[cat] / total if total > 0 else 0.0
            out.append((r["study"], r["world_size"], r["rank"], cat, r[cat], ratio))
    return pd.DataFrame(out, columns=[*_KEYS, "idle_category", "idle_time", "idle_time_ratio"])


def _kernel_types(rows: list[tuple[str, int, str, float]]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["study", "world_size", "kernel_type", "sum"])
    busy = df.groupby(["study", "world_size"])["sum"].transform("sum")
    df["percentage"] = (100 * df["sum"] / busy.where(busy > 0)).fillna(0.0).round(2)
    return df
