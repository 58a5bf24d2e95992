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
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracescale.ingest.groups import key_members, key_role

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

    def describe(self, name: str) -> str:
        how = "grows like N" if self.grows else "stays"
        return f"group {name}'s member stride ({self.stride} at N={self.at_n}) {how}"


def group_layouts(instances: pd.DataFrame, proportional: Mapping[str, bool]) -> dict[str, Layout]:
    """Group role (description, else name) -> layout, from the member lists in the instance
    keys of every run (``instances``: world_size, pg, group)."""
    if "pg" not in instances or not len(instances):
        return {}
    strides: dict[str, dict[int, list[int]]] = {}
    for pg, n in set(zip(instances["pg"].astype(str), instances["world_size"], strict=True)):
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
        sizes = instances.loc[
            (instances["world_size"] == n1) & (instances["pg"].astype(str).map(key_role) == name),
            "group",
        ]
        size = float(np.median(sizes)) if len(sizes) else 0.0
        spans_world = d1 > 1 and d1 * size == n1
        out[name] = Layout(d1, n1, not proportional.get(name, False) and spans_world, True)
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
