"""Collective instances' process groups -> their topology tier (intra/inter node) at any N.

A group crosses nodes when its members do, not when it is large: data parallel across
tensor-parallel pairs, {0, 8} with 8 GPUs per node, is two ranks on two nodes; a pair inside
one node stays there whatever the world size. Members come from the instance key
(``name:members``, :mod:`tracescale.ingest.groups`); without them the tier follows the size
(more ranks than a node holds), as it must.

At a new N the members are not measured, so each group's layout is read from the measured
member lists: an arithmetic progression of some stride (a contiguous block has stride 1) whose
stride either stays or grows like N. Over several runs the measured strides decide; from one
run it is inferred (and said so in the report's assumptions): a group whose size grows keeps
its stride (it is the growing mesh dimension, its stride the product of the dimensions inside
it); a group of fixed size keeps its stride too, unless its members span the whole world
(stride x size = N: the outermost mesh dimension, so the dimension that grows lies inside it
and its stride grows like N). This holds for any mesh whose dimensions keep their order.

Whether a group's size grows is read from the same runs (:func:`size_laws`): over two or more
runs from the trend of its last two (HSDP's shard group, 2, 4, 8, 8 ranks at N = 2..16, fills
a node and stays there); from one run it grows when it holds the whole world, when its members
span it (stride x size = N, the outermost mesh dimension: data parallel across model shards,
HSDP's replicate group {r, r + 8} at N = 16), or when it is the only group crossing nodes while
another stays inside one; otherwise it stays, and the assumptions say the runs cannot tell.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracescale.groups import factorize, group_codes, group_median
from tracescale.ingest.groups import key_members, key_role
from tracescale.table import Table, as_table, groupby, text

INTRA, INTER = "intra", "inter"


def tier_of(group: float, gpus_per_node: int | None) -> str:
    """``inter`` when a group spans more ranks than one node holds (its members unknown)."""
    return INTER if gpus_per_node is not None and group > gpus_per_node else INTRA


def _crosses(first: int, size: float, stride: int, gpus_per_node: int) -> bool:
    """Whether ``size`` ranks from ``first`` ``stride`` apart lie on more than one node."""
    return (first % gpus_per_node) + (max(size, 1.0) - 1.0) * stride >= gpus_per_node


def stride_of(members: tuple[int, ...] | None) -> int | None:
    """The common difference of sorted members in arithmetic progression, else None."""
    if members is None or len(members) < 2:
        return None
    step = members[1] - members[0]
    if all(b - a == step for a, b in itertools.pairwise(members)):
        return step
    return None


def measured_tier(group: float, pg: str, gpus_per_node: int | None) -> str:
    """Tier of a measured instance: from its members when the key holds them."""
    if gpus_per_node is None:
        return INTRA
    members = key_members(pg) if pg else None
    if members is None or len(members) < 2:
        return tier_of(group, gpus_per_node)
    return INTER if members[0] // gpus_per_node != members[-1] // gpus_per_node else INTRA


@dataclass(frozen=True)
class Layout:
    """How one group's members lie among the ranks."""

    stride: int  # at ``at_n`` ranks
    at_n: int
    grows: bool  # the stride grows like N (else it stays)
    inferred: bool  # from one run's member list (else measured over several runs)
    #: why a group seen in one run is read to grow (its size law rests on its layout too)
    why: str = field(default="", compare=False)

    def describe(self, name: str) -> str:
        how = "grows like N" if self.grows else "stays"
        said = f"group {name}'s member stride ({self.stride} at N={self.at_n}) {how}"
        return f"{said}; its size grows like N: {self.why}" if self.why else said


def group_layouts(
    instances: Any, proportional: Mapping[str, bool], why: Mapping[str, str] | None = None
) -> dict[str, Layout]:
    """Group role (description, else name) -> layout, from the member lists in the instance
    keys of every run (``instances``: world_size, pg, group; ``why``: :class:`SizeLaws`'
    reasons, kept beside an inferred layout)."""
    instances = as_table(instances)
    if "pg" not in instances or not len(instances):
        return {}
    strides: dict[str, dict[int, list[int]]] = {}
    for pg, n in set(
        zip(instances["pg"].astype(str).tolist(), instances.col("world_size").tolist(), strict=True)
    ):
        stride = stride_of(key_members(pg))
        if stride is not None:
            strides.setdefault(key_role(pg), {}).setdefault(int(n), []).append(stride)
    out: dict[str, Layout] = {}
    for name, per_n in strides.items():
        ns = sorted(per_n)
        n1 = ns[-1]
        d1 = int(np.median(per_n[n1]))
        if len(ns) >= 2:
            n0, d0 = ns[0], float(np.median(per_n[ns[0]]))
            got = np.log(d1 / d0)
            grows = bool(abs(got - np.log(n1 / n0)) < abs(got))
            out[name] = Layout(d1, n1, grows, inferred=False)
            continue
        roles = np.array([key_role(k) for k in instances["pg"].astype(str).tolist()], dtype=object)
        sizes = instances.col("group")[(instances.col("world_size") == n1) & (roles == name)]
        size = float(np.median(sizes)) if len(sizes) else 0.0
        spans_world = d1 > 1 and d1 * size == n1
        grows = not proportional.get(name, False) and spans_world
        out[name] = Layout(d1, n1, grows, True, (why or {}).get(name, ""))
    return out


def tier_at(
    group: float,
    pg: str,
    ref_n: int,
    n: int,
    gpus_per_node: int | None,
    size_at_n: float,
    layouts: Mapping[str, Layout],
) -> str:
    """Tier at ``n`` ranks of an instance measured at ``ref_n`` in a group of ``group`` ranks
    (``size_at_n``: its size at ``n``, from the group's size law)."""
    if gpus_per_node is None:
        return INTRA
    members = key_members(pg) if pg else None
    if members is None or len(members) < 2:
        return tier_of(size_at_n, gpus_per_node)
    if n == ref_n:
        return measured_tier(group, pg, gpus_per_node)
    stride = stride_of(members)
    layout = layouts.get(key_role(pg))
    if stride is None or layout is None:  # irregular members: kept while the size is
        if size_at_n == len(members):
            return measured_tier(group, pg, gpus_per_node)
        return tier_of(size_at_n, gpus_per_node)
    grown = max(round(stride * n / ref_n), 1) if layout.grows else stride
    return INTER if _crosses(members[0], size_at_n, grown, gpus_per_node) else INTRA


def _grew(n0: float, g0: float, n1: float, g1: float) -> bool:
    """Whether sizes ``g0`` -> ``g1`` over world sizes ``n0`` -> ``n1`` follow N (else stay),
    whichever they are nearer in log distance."""
    got = np.log(g1 / g0)
    return bool(abs(got - np.log(n1 / n0)) < abs(got))


def _crosses_nodes(keys: list[str], gpus_per_node: int) -> bool:
    """Whether an instance of these keys has members on more than one node."""
    sized = [(k, len(m)) for k in keys if (m := key_members(k))]
    return any(measured_tier(float(g), k, gpus_per_node) == INTER for k, g in sized)


def _one_run_law(
    name: str, n: int, size: float, keys: list[str], others: Mapping[str, list[str]],
    gpus_per_node: int | None,
) -> tuple[bool, str]:  # fmt: skip
    """Size law of a group seen in the run at ``n`` only (``keys``: its instance keys there;
    ``others``: the other roles' keys in that run), and why, in words."""
    seen = f"measured at N={n} only ({size:g} ranks)"
    if size >= n:
        return True, ""
    strides = [stride_of(key_members(k)) for k in keys]
    spans = [d for d in strides if d is not None and d > 1 and d * size == n]
    if spans:
        return True, (
            f"{seen}, its members span the world (stride {spans[0]} x {size:g} ranks = N): "
            f"the outermost mesh dimension"
        )
    if gpus_per_node is not None and _crosses_nodes(keys, gpus_per_node):
        inside = sorted(r for r, ks in others.items() if any(map(key_members, ks)))
        if inside and not any(_crosses_nodes(others[r], gpus_per_node) for r in inside):
            return True, (
                f"{seen}, it is the only group crossing nodes while {', '.join(inside)} "
                f"stay inside one"
            )
    return False, f"group {name} is {seen}: the runs cannot tell whether its size grows; it stays"


def grew_like_n(n0: float, g0: float, n1: float, g1: float) -> bool:
    """Whether sizes ``g0`` -> ``g1`` over world sizes ``n0`` -> ``n1`` follow N (the size
    laws' reading, for a dimension that is no process group: the pipeline's stage count)."""
    return _grew(n0, g0, n1, g1)


@dataclass(frozen=True)
class GroupRole:
    """One process group role (description, else name) over the runs, as its size law reads it:
    what the parallelism mesh (``replay.links.mesh``) and the links (:class:`SizeLaws`) share."""

    name: str
    #: (world size, median group size of its instances there), by world size
    sizes: tuple[tuple[int, float], ...]
    #: (world size, its distinct instance keys there), by world size
    keys: tuple[tuple[int, tuple[str, ...]], ...]
    #: (world size, its collective types there, sorted), by world size
    collectives: tuple[tuple[int, tuple[str, ...]], ...]
    grows: bool  # its size follows N (else it stays)
    #: why a group seen in one run is read to grow (said with its inferred layout)
    why: str = ""
    #: assumptions: the runs cannot tell its law, or its last runs overrule its first
    notes: tuple[str, ...] = ()

    def size_at(self, n: int) -> float | None:
        return dict(self.sizes).get(n)

    def keys_at(self, n: int) -> tuple[str, ...]:
        return dict(self.keys).get(n, ())

    def collectives_at(self, n: int) -> tuple[str, ...]:
        return dict(self.collectives).get(n, ())


def group_roles(instances: Any, gpus_per_node: int | None = None) -> tuple[GroupRole, ...]:
    """Each named group role's sizes, keys and size law over the runs (``instances``:
    world_size, pg, group, and collective where known), by role name."""
    instances = as_table(instances)
    if "pg" not in instances or not len(instances):
        return ()
    codes, uniq = factorize(text(instances, "pg").tolist())
    role_of = np.asarray([key_role(k) for k in uniq], dtype=object)
    roles = role_of[codes] if len(uniq) else np.zeros(0, dtype=object)
    pgs = np.asarray(uniq, dtype=object)[codes]
    keep = roles != ""
    colls = np.empty(len(instances), dtype=object)
    colls[:] = instances["collective"].astype(str).tolist() if "collective" in instances else ""
    named = Table(
        {
            "world_size": instances.col("world_size")[keep],
            "group": instances.col("group")[keep],
            "_role": roles[keep],
            "_pg": pgs[keep],
            "_coll": colls[keep],
        }
    )
    by_run: dict[int, dict[str, list[str]]] = {}
    by_coll: dict[str, dict[int, tuple[str, ...]]] = {}
    for (n, role), rows in groupby(named, ["world_size", "_role"]):
        by_run.setdefault(int(n), {})[str(role)] = sorted(set(rows.col("_pg").tolist()))
        found = sorted(set(rows.col("_coll").tolist()) - {""})
        by_coll.setdefault(str(role), {})[int(n)] = tuple(found)
    out: list[GroupRole] = []
    for role, rows in groupby(named, "_role"):
        name = str(role)
        n_codes, (n_sizes,) = group_codes(rows.col("world_size"))
        per_n = group_median(n_codes, rows.col("group"), len(n_sizes))
        ns, gs = [float(x) for x in n_sizes], [float(x) for x in per_n]
        sizes = tuple((int(n), g) for n, g in zip(ns, gs, strict=True))
        keys = tuple((int(n), tuple(by_run[int(n)][name])) for n in ns)
        colls_at = tuple((int(n), by_coll[name][int(n)]) for n in ns)
        if len(ns) >= 2 and min(gs[-2:]) > 0:
            grows = _grew(ns[-2], gs[-2], ns[-1], gs[-1])
            notes: tuple[str, ...] = ()
            if gs[0] > 0 and _grew(ns[0], gs[0], ns[-1], gs[-1]) != grows:
                how = "grows like N" if grows else "stays"
                notes = (
                    f"group {name}'s size {how} as from N={ns[-2]:g} to N={ns[-1]:g} "
                    f"({gs[-2]:g} to {gs[-1]:g} ranks), not as from N={ns[0]:g} "
                    f"({gs[0]:g} ranks)",
                )
            out.append(GroupRole(name, sizes, keys, colls_at, grows, notes=notes))
            continue
        n = int(ns[-1])
        others = {r: ks for r, ks in by_run[n].items() if r != name}
        grows, note = _one_run_law(name, n, gs[-1], by_run[n][name], others, gpus_per_node)
        why = note if note and grows else ""
        notes = (note,) if note and not grows else ()
        out.append(GroupRole(name, sizes, keys, colls_at, grows, why, notes))
    return tuple(out)


@dataclass(frozen=True)
class SizeLaws:
    """Per group role (description, else name): whether its size follows N (else it stays)."""

    grows: dict[str, bool]
    #: assumptions: a group the runs cannot tell about, last runs that overrule the first
    notes: list[str]
    #: role -> why a group seen in one run is read to grow (said with its inferred layout)
    why: dict[str, str]


def size_laws(instances: Any, gpus_per_node: int | None = None) -> SizeLaws:
    """Each group role's size law over the runs (``instances``: world_size, pg, group):
    :func:`group_roles`' laws, notes and reasons."""
    roles = group_roles(instances, gpus_per_node)
    return SizeLaws(
        {r.name: r.grows for r in roles},
        [note for r in roles for note in r.notes],
        {r.name: r.why for r in roles if r.why},
    )
