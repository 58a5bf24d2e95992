"""Collective instances of the measured runs (world_size, pg, group, collective; send/recv rows
apart) in; per run its parallelism mesh out: each dimension's name, size, collectives, node span
and size law, and warnings where the dimensions cannot be told apart.

Why from :func:`tracescale.replay.links.topology.group_roles`: the mesh a report shows must be
the one the projection scaled (which group grows with N, which crosses nodes), not a second
reading of the same groups. A dimension's name comes first from its group's name or
description (DeviceMesh's ``mesh_dp_shard``, Megatron's ``tp_group``), then from what only one
dimension does (an all-to-all is expert parallel's token exchange, send/recv the pipeline's),
then from what the size law says (a group that grows with N and all-reduces is data parallel;
one that all-gathers and reduce-scatters is sharded data parallel: FSDP, ZeRO); anything else
keeps a neutral name ("group of 4 (allreduce)"). The pipeline's stage count is no group's size
(its send/recv groups hold two ranks): it is the world size over the other dimensions (expert
parallel left out: it is carved from data parallel), and said to be inferred; its model chunks
per rank (interleaved 1F1B) are what the replayed stage's send/recv counts read
(``laws.interleave``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracescale.ingest.groups import key_role
from tracescale.replay.links.topology import INTER, GroupRole, grew_like_n, measured_tier
from tracescale.table import Table, as_table, groupby, text

TP, PP, DP, SHARD, REPLICATE, EP, CP = "TP", "PP", "DP", "DP-shard", "DP-replicate", "EP", "CP"
#: Words of a group's name or description that say its dimension, most specific first.
_NAME_HINTS: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"shard", "fsdp", "zero"}), SHARD),
    (frozenset({"replicate"}), REPLICATE),
    (frozenset({"tp", "tensor"}), TP),
    (frozenset({"pp", "pipe", "pipeline", "stage"}), PP),
    (frozenset({"ep", "expert", "moe"}), EP),
    (frozenset({"cp", "context"}), CP),
    (frozenset({"dp", "data", "ddp"}), DP),
)
#: Collective types that name no dimension (a barrier synchronizes, "other" is unknown).
_SILENT = frozenset({"barrier", "other"})
P2P = "sendrecv"


@dataclass(frozen=True)
class MeshDim:
    """One dimension of one run's mesh."""

    dimension: str  # TP, PP, DP, DP-shard, DP-replicate, EP, CP, or "group of 4 (allreduce)"
    group: str  # its process group role (description, else name); '' unnamed
    size: int | None  # ranks in it (None: a pipeline whose stage count cannot be read)
    collectives: tuple[str, ...]
    spans_nodes: bool | None  # None: GPUs per node unknown
    grows: bool  # its size follows N over the runs (the size law the projection uses)
    told_by: str  # "name", "collectives", "size law" or "" (neutral)
    size_inferred: bool = False  # the world size over the other dimensions (a pipeline)
    #: A pipeline's model chunks per rank (interleaved 1F1B's virtual stages; 1: plain 1F1B),
    #: read from the replayed stage's send/recv counts (``laws.interleave``); None: not read
    virtual: int | None = None


@dataclass(frozen=True)
class Mesh:
    """Per measured world size its dimensions, and what could not be told."""

    runs: tuple[tuple[int, tuple[MeshDim, ...]], ...]
    warnings: tuple[str, ...]

    def at(self, n: int) -> tuple[MeshDim, ...]:
        return dict(self.runs).get(n, ())


def _name_hint(role: str) -> str:
    words = set(re.split(r"[^a-z0-9]+", role.lower()))
    return next((dim for hints, dim in _NAME_HINTS if words & hints), "")


def name_dimension(
    role: str, collectives: Sequence[str], size: float, grows: bool
) -> tuple[str, str, str]:
    """(dimension, told by, a warning when the collectives overrule the name) of one group."""
    hint = _name_hint(role)
    if "alltoall" in collectives:  # MoE's token exchange (Ulysses' is named context parallel)
        if hint in (EP, CP):
            return hint, "name", ""
        said = f" (named like {hint})" if hint else ""
        note = f"group {role}{said} runs all-to-all: read as expert parallel (EP)" if hint else ""
        return EP, "collectives", note
    if hint:
        return hint, "name", ""
    kinds = set(collectives)
    if grows and {"allgather", "reducescatter"} <= kinds:
        return SHARD, "size law", ""
    if grows and kinds and kinds <= {"allreduce", "broadcast"}:
        return DP, "size law", ""
    return f"group of {size:g} ({', '.join(collectives)})", "", ""


def _spans(keys: Sequence[str], size: float, gpus_per_node: int | None) -> bool | None:
    if gpus_per_node is None:
        return None
    return any(measured_tier(size, k, gpus_per_node) == INTER for k in keys)


def _unnamed(instances: Table, n: int) -> list[tuple[float, tuple[str, ...], list[str]]]:
    """Groups of the run at ``n`` without a role: (size, collectives, keys) per size; their
    size grows with N when they hold the world (the links' reading of such a group)."""
    if not len(instances) or "pg" not in instances:
        return []
    rows = instances[instances.col("world_size") == n]
    pgs = text(rows, "pg").tolist()
    rows = rows[np.asarray([key_role(k) == "" for k in pgs], dtype=np.bool_)]
    out = []
    for size, sub in groupby(rows, "group"):
        kinds = tuple(sorted(set(sub["collective"].astype(str).tolist()) - _SILENT))
        out.append((float(size), kinds, sorted(set(text(sub, "pg").tolist()))))
    return out


def _pipeline(
    n: int,
    dims: Sequence[MeshDim],
    keys: Sequence[str],
    gpus_per_node: int | None,
    virtual: int | None = None,
) -> MeshDim:
    """The pipeline dimension of the run at ``n`` (``keys``: its send/recv groups; ``virtual``:
    its model chunks per rank, where read)."""
    inner = [d.size for d in dims if d.dimension != EP and d.size and d.size < n]
    prod = math.prod(s for s in inner if s)
    stages = n // prod if n % prod == 0 and n // prod >= 2 else None
    role = ", ".join(sorted({key_role(k) for k in keys})) or ""
    spans = _spans(keys, 2.0, gpus_per_node)
    return MeshDim(PP, role, stages, (P2P,), spans, False, "collectives", True, virtual)


def run_meshes(
    instances: Any,
    roles: Sequence[GroupRole],
    p2p: Mapping[int, Sequence[str]],
    gpus_per_node: int | None,
    virtual: Mapping[int, int | None] | None = None,
) -> Mesh:
    """The mesh of every measured run. ``instances``: world_size, pg, group, collective (no
    send/recv rows; ``roles``: :func:`group_roles` of them); ``p2p``: per world size the
    pipeline's send/recv group keys; ``virtual``: per world size its model chunks per rank
    (interleaved 1F1B), where read."""
    instances = as_table(instances)
    sizes = sorted({*(int(n) for n in instances.get("world_size", [])), *p2p})
    # a job's chunks per rank do not change with N: a run whose replayed stage could not tell
    # (a middle stage) takes the other runs' reading where they agree
    read = {v for v in (virtual or {}).values() if v is not None}
    chunks = {n: (virtual or {}).get(n) or (min(read) if len(read) == 1 else None) for n in sizes}
    runs: list[tuple[int, tuple[MeshDim, ...]]] = []
    notes: list[str] = []
    for n in sizes:
        dims: list[MeshDim] = []
        for role in roles:
            size = role.size_at(n)
            kinds = tuple(k for k in role.collectives_at(n) if k not in _SILENT)
            if size is None or size <= 1 or not kinds:
                continue
            dim, told, note = name_dimension(role.name, kinds, size, role.grows)
            spans = _spans(role.keys_at(n), size, gpus_per_node)
            dims.append(MeshDim(dim, role.name, round(size), kinds, spans, role.grows, told))
            notes.extend([note] if note else [])
        for size, kinds, _keys in _unnamed(instances, n):
            if size <= 1 or not kinds:
                continue
            grows = size >= n
            dim, told, _ = name_dimension("", kinds, size, grows)
            spans = _spans(_keys, size, gpus_per_node)
            dims.append(MeshDim(dim, "", round(size), kinds, spans, grows, told))
        if p2p.get(n):
            dims.append(_pipeline(n, dims, p2p[n], gpus_per_node, chunks[n]))
        runs.append((n, tuple(dims)))
    return Mesh(tuple(_pipeline_growth(runs)), (*dict.fromkeys(notes), *_ambiguous(runs)))


def _pipeline_growth(
    runs: list[tuple[int, tuple[MeshDim, ...]]],
) -> list[tuple[int, tuple[MeshDim, ...]]]:
    """The pipeline's stage count read as the size laws read a group's size: over its last two
    runs with a count (one run: it stays)."""
    counts = [(n, d.size) for n, dims in runs for d in dims if d.dimension == PP and d.size]
    if len(counts) < 2:
        return runs
    (n0, g0), (n1, g1) = counts[-2], counts[-1]
    grows = grew_like_n(n0, g0, n1, g1)
    return [
        (n, tuple(_with_growth(d, grows) if d.dimension == PP else d for d in dims))
        for n, dims in runs
    ]


def _with_growth(d: MeshDim, grows: bool) -> MeshDim:
    return MeshDim(d.dimension, d.group, d.size, d.collectives, d.spans_nodes, grows,
                   d.told_by, d.size_inferred, d.virtual)  # fmt: skip


def _where(spans: bool | None) -> str:
    if spans is None:
        return "(node span unknown)"
    return "across nodes" if spans else "inside a node"


def _ambiguous(runs: Sequence[tuple[int, tuple[MeshDim, ...]]]) -> list[str]:
    """Pairs of dimensions of one size and node span running the same collectives, one at
    least not named by its group: where the mesh cannot tell which is which."""
    sure = {"name", "collectives"}
    seen: dict[tuple[str, str, str, str, str, str], list[str]] = {}
    for n, dims in runs:
        for i, a in enumerate(dims):
            for b in dims[i + 1 :]:
                if a.size is None or (a.size, a.spans_nodes, a.collectives) != (
                    b.size, b.spans_nodes, b.collectives,
                ):  # fmt: skip
                    continue
                if a.told_by in sure and b.told_by in sure:
                    continue
                colls = ", ".join(a.collectives)
                key = (a.group, b.group, _where(a.spans_nodes), colls, a.dimension, b.dimension)
                seen.setdefault(key, []).append(f"{a.size} at N={n}")
    return [
        f"groups {ga or 'unnamed'} and {gb or 'unnamed'} hold as many ranks each {where} "
        f"({', '.join(at)}) and run the same collectives ({colls}), and their names do not say "
        f"which mesh dimension each is: the mesh cannot tell them apart (read as {da} and {db} "
        f"from their size laws)"
        for (ga, gb, where, colls, da, db), at in seen.items()
    ]


def dim_dict(d: MeshDim) -> dict[str, Any]:
    """One dimension's JSON form; an interleaved pipeline's adds ``virtual_chunks`` (its model
    chunks per rank: absent for plain 1F1B or where not read)."""
    out: dict[str, Any] = {
        "dimension": d.dimension,
        "group": d.group,
        "size": d.size,
        "collectives": list(d.collectives),
        "spans_nodes": d.spans_nodes,
        "grows": d.grows,
        "told_by": d.told_by,
        "size_inferred": d.size_inferred,
    }
    if d.virtual is not None and d.virtual > 1:
        out["virtual_chunks"] = d.virtual
    return out


def mesh_dict(mesh: Mesh) -> dict[str, Any]:
    """The JSON form: ``{"runs": {"<N>": [dimension...]}, "warnings": [...]}``."""
    return {
        "runs": {str(n): [dim_dict(d) for d in dims] for n, dims in mesh.runs},
        "warnings": list(mesh.warnings),
    }


def meshes_into_runs(run_dicts: Sequence[dict[str, Any]], scaling: Mapping[str, Any]) -> None:
    """Each run entry's ``mesh``: its dimensions from ``scaling.replay.mesh`` (``[]`` where the
    replay did not read the run); for the pipeline to call after ``apply_replay``."""
    meshes = dict(dict(scaling.get("replay") or {}).get("mesh") or {}).get("runs") or {}
    for rd in run_dicts:
        rd["mesh"] = list(meshes.get(str(rd.get("world_size")), []))
