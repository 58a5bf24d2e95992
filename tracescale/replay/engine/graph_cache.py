"""Representative rank's replay input <-> the on-disk cache: trace path in, :class:`GraphInput` out.

Why: a replay needs the graph of one rank per run, and building it means reading, decoding and
classifying that rank's whole trace once more. A cached ``analyze`` must not touch any trace,
so the built graph (plus the rank's collective instances and device count, the only other
things the replay takes from the trace) is stored beside the per-rank results, in the same
format: plain arrays and JSON behind a checksum (:mod:`tracescale.parallel.entry`), never
pickle. The key is the per-rank key (file path, size, mtime, rules digest, memory budget,
tracescale version + ingest/classify source hash) extended by the hash of the sources that
build a graph and by the rank index, and by the size and mtime of the execution trace paired
with the rank (its dependencies are in the graph), so a changed trace, ET, rule, rank choice or
graph code is a miss. Anything that does not verify is a miss and is rebuilt.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tracescale.categories import CATEGORIES
from tracescale.ingest.sniff import stamp
from tracescale.parallel.cache import (
    MAX_ENTRY_BYTES,
    CacheKey,
    ResultCache,
    code_version,
    make_key,
    read_regular_file,
)
from tracescale.parallel.entry import (
    FORMAT_VERSION,
    EntryError,
    arrays_of,
    frame_from_schema,
    frame_schema,
    pack,
    read_header,
)
from tracescale.parallel.tasks import RankTask
from tracescale.replay.graph.build import Graph
from tracescale.table import Table, as_table

_KIND = "replay-graph"
_ET_FIELDS = ("et_producer", "et_consumer")
_ARRAY_FIELDS = (
    "kind", "res", "start", "dur", "dep", "lag", "dep2", "fixed", "tail", "release",
    "group", "coll", "step", "order", "step_first", "step_last", "step_numbers", "category",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class GraphInput:
    """What a run's replay takes from its representative rank's trace.

    ``collectives``: the rank's collective instances as classify found them (``graph.
    collectives['row']`` indexes it); ``devices``: length of the trace's deviceProperties.
    """

    graph: Graph
    collectives: Table
    devices: int


@functools.lru_cache(maxsize=1)
def _graph_source_digest() -> str:
    """Hash of every module that builds a graph (this package and the waits it adds), so a
    cached graph is rebuilt whenever any of them changes."""
    replay = Path(__file__).parents[1]
    digest = hashlib.sha256()
    for path in sorted([*replay.glob("graph/*.py"), *replay.glob("waits/*.py")]):
        digest.update(path.relative_to(replay).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def graph_key(
    path: str, rank: int, rules_digest: str, memory_budget: int, execution_trace: str = ""
) -> CacheKey | None:
    """The cache key of ``rank``'s graph from ``path`` now, or None (file cannot be versioned);
    ``execution_trace``: the path of the ET paired with the rank, "" none."""
    base = make_key(RankTask(path=path, rank=rank, memory_budget=memory_budget), rules_digest)
    if base is None:
        return None
    version = f"{code_version()}+{_KIND}-{_graph_source_digest()}+rank{rank}"
    if execution_trace:
        et = stamp(execution_trace)
        if not et:
            return None
        version += f"+et:{os.path.abspath(execution_trace)}:{et}"
    return dataclasses.replace(base, version=version)


def encode_graph(item: GraphInput, key: dict[str, Any]) -> bytes:
    """Entry bytes of ``item`` under ``key`` (EntryError for data the format cannot hold)."""
    g = item.graph
    arrays: dict[str, Any] = {
        f: np.ascontiguousarray(getattr(g, f), dtype=np.int64) for f in _ARRAY_FIELDS
    }
    arrays["et_producer"] = np.ascontiguousarray(g.et_pairs[:, 0], dtype=np.int64)
    arrays["et_consumer"] = np.ascontiguousarray(g.et_pairs[:, 1], dtype=np.int64)
    frames = {
        "graph.collectives": frame_schema("graph.collectives", g.collectives, arrays),
        "collectives": frame_schema("collectives", as_table(item.collectives), arrays),
    }
    header = {
        "format": FORMAT_VERSION,
        "kind": _KIND,
        "key": key,
        "groups": list(g.groups),
        "devices": int(item.devices),
        "inferred_waits": int(g.inferred_waits),
        "held_waits": int(g.held_waits),
        "frames": frames,
        "arrays": {
            k: {"dtype": str(v.dtype), "shape": list(v.shape)} for k, v in sorted(arrays.items())
        },
    }
    return pack(header, arrays)


def decode_graph(blob: bytes, key: dict[str, Any]) -> GraphInput:
    """The :class:`GraphInput` in ``blob`` if it is a graph entry holding exactly ``key``."""
    header, payload = read_header(blob)
    if header.get("kind") != _KIND or header.get("key") != key:
        raise EntryError("not a graph entry for this key")
    arrays = arrays_of(header, payload)
    if set(arrays) - {*_ARRAY_FIELDS, *_ET_FIELDS} - _frame_arrays(header):
        raise EntryError("unexpected arrays")
    cols = {f: arrays[f] for f in _ARRAY_FIELDS}
    n = len(cols["kind"])
    if any(cols[f].dtype != np.int64 or cols[f].ndim != 1 for f in _ARRAY_FIELDS):
        raise EntryError("graph arrays are not 1-D int64")
    per_node = [f for f in _ARRAY_FIELDS if not f.startswith("step_")]
    if any(len(cols[f]) != n for f in per_node):
        raise EntryError("graph arrays differ in length")
    groups = header.get("groups")
    devices = header.get("devices")
    if not isinstance(groups, list) or not all(isinstance(s, str) for s in groups):
        raise EntryError("bad group names")
    if type(devices) is not int:
        raise EntryError("bad device count")
    inferred = header.get("inferred_waits")
    if type(inferred) is not int or inferred < 0:
        raise EntryError("bad inferred wait count")
    held = header.get("held_waits")
    if type(held) is not int or held < 0:
        raise EntryError("bad held wait count")
    _check_indices(cols, n, len(groups))
    pairs = _et_pairs(arrays, n)
    frames = header["frames"]
    graph = Graph(
        kind=cols["kind"].astype(np.int8),
        res=cols["res"].astype(np.int32),
        start=cols["start"],
        dur=cols["dur"],
        dep=cols["dep"].astype(np.int32),
        lag=cols["lag"],
        dep2=cols["dep2"].astype(np.int32),
        fixed=cols["fixed"],
        tail=cols["tail"],
        release=cols["release"],
        group=cols["group"].astype(np.int32),
        groups=tuple(groups),
        coll=cols["coll"].astype(np.int32),
        step=cols["step"].astype(np.int32),
        order=cols["order"].astype(np.intp),
        step_first=cols["step_first"],
        step_last=cols["step_last"],
        step_numbers=cols["step_numbers"],
        collectives=frame_from_schema(frames["graph.collectives"], arrays),
        category=cols["category"].astype(np.int8),
        inferred_waits=inferred,
        held_waits=held,
        et_pairs=pairs,
    )
    return GraphInput(graph, frame_from_schema(frames["collectives"], arrays), devices)


def _et_pairs(arrays: dict[str, Any], n: int) -> npt.NDArray[np.int64]:
    """The stored execution-trace node pairs, checked as node references."""
    a, b = arrays.get("et_producer"), arrays.get("et_consumer")
    if a is None or b is None:
        raise EntryError("no execution-trace pairs")
    if a.dtype != np.int64 or b.dtype != np.int64 or a.ndim != 1 or a.shape != b.shape:
        raise EntryError("bad execution-trace pairs")
    if len(a) and (min(a.min(), b.min()) < 0 or max(a.max(), b.max()) >= n):
        raise EntryError("execution-trace pair out of range")
    return np.stack([a, b], axis=1).reshape(-1, 2)


def _frame_arrays(header: dict[str, Any]) -> set[str]:
    return {
        str(c["array"])
        for schema in dict(header.get("frames", {})).values()
        for c in schema["columns"]
        if "array" in c
    }


def _check_indices(cols: dict[str, Any], n: int, n_groups: int) -> None:
    """Node references inside the graph must point at nodes: a crafted entry could not
    otherwise be told from a real one by the replay, which indexes with them."""
    for f in ("dep", "dep2"):
        if len(cols[f]) and (cols[f].min() < -1 or cols[f].max() >= n):
            raise EntryError(f"{f} out of range")
    if n and (cols["group"].min() < 0 or cols["group"].max() >= n_groups):
        raise EntryError("group out of range")
    # Held in 32 bits in memory: anything wider would wrap, not fail.
    for f, low in (("res", 0), ("coll", -1), ("step", -1)):
        if n and (cols[f].min() < low or cols[f].max() >= 2**31):
            raise EntryError(f"{f} out of range")
    if n and (cols["category"].min() < -1 or cols["category"].max() >= len(CATEGORIES)):
        raise EntryError("category out of range")
    if sorted(cols["order"].tolist()) != list(range(n)):
        raise EntryError("order is not a permutation")
    for f in ("step_first", "step_last"):
        if len(cols[f]) and (cols[f].min() < -1 or cols[f].max() >= n):
            raise EntryError(f"{f} out of range")


def cached_graph_input(
    cache_dir: str | None,
    path: str,
    rank: int,
    rules_digest: str,
    memory_budget: int,
    build: Callable[[], GraphInput],
    execution_trace: str = "",
) -> GraphInput:
    """``rank``'s graph input from the cache under ``cache_dir``, else ``build()`` (stored when
    the file did not change meanwhile). Cache problems are misses, never errors.
    ``execution_trace``: the ET paired with the rank ("" none), part of the key."""
    cache = ResultCache(cache_dir)
    key = graph_key(path, rank, rules_digest, memory_budget, execution_trace)
    if key is None:
        return build()
    slot = os.path.join(cache.directory, key.slot()[:-3] + ".rg")
    blob = read_regular_file(slot, MAX_ENTRY_BYTES)
    if blob is not None:
        try:
            return decode_graph(blob, key.as_dict())
        except Exception:  # untrusted bytes: whatever fails to verify or parse is a miss
            pass
    item = build()
    if graph_key(path, rank, rules_digest, memory_budget, execution_trace) == key:
        # Data this format cannot hold exactly is simply not cached.
        with contextlib.suppress(EntryError):
            cache.put_bytes(slot, encode_graph(item, key.as_dict()))
    return item
