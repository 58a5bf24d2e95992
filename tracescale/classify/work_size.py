"""Work per rank from tensor shapes: a rank's ops with "Input Dims" in, per (op, input) the median
number of elements out; across world sizes, whether the inputs shrink like 1/N.

Timing cannot always tell strong from weak scaling: on an oversubscribed machine a strong
study's per-rank compute grows with N. Shapes can: splitting a fixed global batch shrinks the
activations every op receives (``aten::linear`` gets ``[32, 128]`` at N=2 and ``[16, 128]`` at
N=4) while weights stay put, and weak scaling keeps every shape. Traces recorded without
``record_shapes`` carry no dims; then nothing is concluded here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracescale.classify.timeline import BOOL
from tracescale.ingest.trace import RankTrace

#: Columns of ``RankResult.input_sizes``.
SIZE_COLUMNS = ("name", "position", "elements")
#: Keys (op, input position) kept per rank: the most frequent ones, enough to decide.
MAX_KEYS = 400
#: An input "shrinks" when its size at the largest N is below this power of the N ratio
#: (the geometric midpoint between constant, exponent 0, and 1/N, exponent -1).
SHRINK_EXPONENT = -0.5
#: Strong by shapes when at least this share of the common inputs shrink (and at least 3).
STRONG_SHARE = 0.15
#: Weak by shapes when no more than this share shrink, over at least this many inputs.
WEAK_SHARE = 0.02
MIN_KEYS = 8


def _elements(text: str) -> list[float]:
    """Elements of each input tensor of one "Input Dims" text (-1 for a non-tensor input)."""
    try:
        dims = json.loads(text)
    except ValueError:
        return []
    out: list[float] = []
    for d in dims if isinstance(dims, list) else []:
        if isinstance(d, list) and d and all(isinstance(x, int) and x >= 0 for x in d):
            out.append(float(np.prod(d, dtype=np.float64)))
        else:
            out.append(-1.0)
    return out


def rank_input_sizes(trace: RankTrace, ops: BOOL) -> pd.DataFrame:
    """Median elements per (op name, input position) over the rank's ``ops`` with dims."""
    ev = trace.events
    sel = ops & (ev.input_dims >= 0)
    if not sel.any():
        return pd.DataFrame({"name": [], "position": [], "elements": []}).astype(
            {"name": "object", "position": "int64", "elements": "float64"}
        )
    pairs = pd.DataFrame({"name_id": ev.name[sel], "dims_id": ev.input_dims[sel]})
    counts = pairs.value_counts().reset_index(name="calls")
    unique_dims = counts["dims_id"].unique()
    dims_text = trace.names(unique_dims.astype(np.int32))
    parsed = {int(i): _elements(t) for i, t in zip(unique_dims, dims_text, strict=True)}
    rows = []
    for name_id, dims_id, calls in counts.itertuples(index=False):
        for pos, el in enumerate(parsed[int(dims_id)]):
            if el > 0:
                rows.append((int(name_id), pos, el, int(calls)))
    if not rows:
        return rank_input_sizes(trace, np.zeros_like(ops))
    frame = pd.DataFrame(rows, columns=["name_id", "position", "elements", "calls"])
    frame = frame.loc[frame.index.repeat(frame["calls"].clip(upper=1000))]
    med = frame.groupby(["name_id", "position"]).agg(
        elements=("elements", "median"), calls=("elements", "size")
    )
    med = med.reset_index()
    med["name"] = trace.names(med["name_id"].to_numpy(dtype=np.int32))
    med = med.sort_values(
        ["calls", "name", "position"], ascending=[False, True, True], kind="mergesort"
    ).head(MAX_KEYS)
    return pd.DataFrame(
        {
            "name": med["name"].to_numpy(dtype=object),
            "position": med["position"].to_numpy(dtype=np.int64),
            "elements": med["elements"].to_numpy(dtype=np.float64),
        }
    ).reset_index(drop=True)


def run_input_sizes(tables: Sequence[pd.DataFrame]) -> dict[str, float]:
    """Per run: ``"name#position"`` -> median elements over the ranks."""
    frames = [t for t in tables if len(t)]
    if not frames:
        return {}
    allt = pd.concat(frames, ignore_index=True)
    med = allt.groupby(["name", "position"])["elements"].median()
    return {f"{name}#{pos}": float(v) for (name, pos), v in med.items()}


@dataclass(frozen=True)
class ShapeVerdict:
    """What the shapes say: ``mode`` None when they cannot tell; ``reason`` quotes numbers."""

    mode: str | None
    reason: str


def mode_from_shapes(sizes: Sequence[int], inputs: Sequence[Mapping[str, float]]) -> ShapeVerdict:
    """Strong when many inputs shrink from the smallest to the largest N, weak when none do."""
    if len(sizes) < 2 or len(inputs) != len(sizes):
        return ShapeVerdict(None, "")
    order = np.argsort(sizes)
    lo, hi = int(order[0]), int(order[-1])
    first, last = inputs[lo], inputs[hi]
    common = sorted(set(first) & set(last))
    if len(common) < MIN_KEYS:
        return ShapeVerdict(None, "")
    n0, n1 = sizes[lo], sizes[hi]
    limit = (n1 / n0) ** SHRINK_EXPONENT
    shrunk = [k for k in common if last[k] <= limit * first[k]]
    share = len(shrunk) / len(common)
    where = f"from N={n0} to N={n1}"
    if share >= STRONG_SHARE and len(shrunk) >= 3:
        example = max(shrunk, key=lambda k: first[k])
        name = example.rsplit("#", 1)[0]
        reason = (
            f"tensor shapes: {len(shrunk)} of {len(common)} op inputs shrank {where} "
            f"(e.g. {name}: {first[example]:.0f} -> {last[example]:.0f} elements; 1/N would "
            f"be x{n0 / n1:.3f}): the global batch is split, so strong scaling"
        )
        return ShapeVerdict("strong", reason)
    if share <= WEAK_SHARE:
        reason = (
            f"tensor shapes: {len(common) - len(shrunk)} of {len(common)} op inputs kept their "
            f"size {where}: the work per rank is constant, so weak scaling"
        )
        return ShapeVerdict("weak", reason)
    return ShapeVerdict(None, "")
