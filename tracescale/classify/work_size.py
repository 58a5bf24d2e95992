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

from tracescale.classify.timeline import BOOL
from tracescale.groups import group_codes, group_median
from tracescale.ingest.trace import RankTrace
from tracescale.table import Table, as_table, concat

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


def rank_input_sizes(trace: RankTrace, ops: BOOL) -> Table:
    """Median elements per (op name, input position) over the rank's ``ops`` with dims."""
    ev = trace.events
    sel = ops & (ev.input_dims >= 0)
    if not sel.any():
        return Table(
            {
                "name": np.zeros(0, dtype=object),
                "position": np.zeros(0, dtype=np.int64),
                "elements": np.zeros(0, dtype=np.float64),
            }
        )
    pair_codes, (name_ids, dims_ids) = group_codes(ev.name[sel], ev.input_dims[sel])
    pair_calls = np.bincount(pair_codes, minlength=len(name_ids))
    unique_dims = np.unique(dims_ids)
    dims_text = trace.names(unique_dims.astype(np.int32))
    parsed = {int(i): _elements(t) for i, t in zip(unique_dims, dims_text, strict=True)}
    rows = []
    for name_id, dims_id, calls in zip(
        name_ids.tolist(), dims_ids.tolist(), pair_calls.tolist(), strict=True
    ):
        for pos, el in enumerate(parsed[int(dims_id)]):
            if el > 0:
                rows.append((int(name_id), pos, el, int(calls)))
    if not rows:
        return rank_input_sizes(trace, np.zeros_like(ops))
    r_name, r_pos, r_el, r_calls = (np.array(c) for c in zip(*rows, strict=True))
    # each (op, input) row counted once per call, at most 1000 times
    repeat = np.minimum(r_calls, 1000)
    codes, (k_name, k_pos) = group_codes(r_name, r_pos)
    codes = np.repeat(codes, repeat)
    elements = group_median(codes, np.repeat(r_el.astype(np.float64), repeat), len(k_name))
    calls = np.bincount(codes, minlength=len(k_name))
    names = np.empty(len(k_name), dtype=object)
    names[:] = trace.names(k_name.astype(np.int32))
    name_rank, _ = group_codes(names)
    order = np.lexsort((k_pos, name_rank, -calls))[:MAX_KEYS]
    return Table(
        {
            "name": names[order],
            "position": k_pos[order].astype(np.int64),
            "elements": elements[order].astype(np.float64),
        }
    )


def run_input_sizes(tables: Sequence[Table]) -> dict[str, float]:
    """Per run: ``"name#position"`` -> median elements over the ranks."""
    frames = [as_table(t) for t in tables if len(t)]
    if not frames:
        return {}
    allt = concat(frames)
    codes, (names, positions) = group_codes(allt.col("name"), allt.col("position"))
    med = group_median(codes, allt.col("elements"), len(names))
    return {
        f"{name}#{pos}": float(v)
        for name, pos, v in zip(names.tolist(), positions.tolist(), med.tolist(), strict=True)
    }


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
