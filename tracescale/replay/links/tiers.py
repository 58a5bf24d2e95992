"""Checks on a study's links: whether the largest run needs a tier the smaller ones lack (a
validation miss there says nothing about the laws), and the warning naming what a target's
unmeasured tier assumed; and how many GPUs a node holds when the user does not say (the tiers
need it), from the traces' device lists or the rank files' host names."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tracescale.replay.engine.run import RunReplay
from tracescale.replay.links.links import unmeasured_inter_range
from tracescale.replay.links.topology import INTER, measured_tier

if TYPE_CHECKING:
    from tracescale.replay.project import ReplayStudy

_HOST = re.compile(r"^([^._]+)")


def same_tiers(runs: Sequence[RunReplay], gpus_per_node: int | None) -> bool:
    """The largest run needs no tier the smaller ones lack (else a miss there says nothing
    about the laws: the smaller runs cannot know the slower links)."""

    def tiers(r: RunReplay) -> set[str]:
        if not len(r.coll):
            return set()
        pgs = r.coll["pg"].astype(str) if "pg" in r.coll else [""] * len(r.coll)
        return {
            measured_tier(float(g), pg, gpus_per_node)
            for g, pg in zip(r.coll["group"], pgs, strict=True)
            if g > 1
        }

    below = set().union(*(tiers(r) for r in runs[:-1]))
    return tiers(runs[-1]) <= below


def tier_warning(study: ReplayStudy, targets: Sequence[int]) -> str | None:
    """A sentence naming the assumption when a target needs a tier never measured."""
    c = study.comm
    if c.gpus_per_node is None or INTER in c.measured_tiers:
        return None
    base = study.base
    groups = base.coll["group"].to_numpy() if len(base.coll) else np.zeros(0)
    pgs = base.coll["pg"].astype(str).tolist() if "pg" in base.coll else [""] * len(groups)
    ref = base.world_size
    need = [
        n for n in targets
        if any(
            c.tier_at(g, pg, ref, n) == INTER
            for g, pg in zip(groups, pgs, strict=True)
        )
    ]  # fmt: skip
    if not need:
        return None
    if c.user_inter is not None:
        how = (
            f"the given inter-node latency {c.user_inter.alpha_s * 1e6:.3g} us and bandwidth "
            f"{1 / c.user_inter.inv_bw / 1e9:.3g} GB/s"
            if c.user_inter.inv_bw > 0
            else "the given inter-node figures"
        )
    elif c.hop_inter is not None:
        how = (
            f"the link the pipeline's send/recv hops across nodes ran at "
            f"({c.hop_inter.alpha_s * 1e6:.3g} us, {1 / c.hop_inter.inv_bw / 1e9:.3g} GB/s) for "
            f"the point estimate; {unmeasured_inter_range()}"
        )
    else:
        how = (
            "the intra-node alpha and beta for the point estimate; "
            f"{unmeasured_inter_range()} (set --inter-node-bandwidth/--inter-node-latency)"
        )
    return (
        f"projections at N={need} cross nodes ({c.gpus_per_node} GPUs per node) but no "
        f"inter-node collective was measured: assumed {how}"
    )


def default_gpus_per_node(runs: Sequence[RunReplay], paths: Sequence[str]) -> int | None:
    """deviceProperties' length when it lists several GPUs, else ranks per host from the rank
    files' names (``host_pid.*``), else None (no tier)."""
    return gpus_per_node_of(max((r.devices for r in runs), default=0), paths)


def gpus_per_node_of(devices: int, paths: Sequence[str]) -> int | None:
    """:func:`default_gpus_per_node` from the longest deviceProperties and the rank files."""
    if devices > 1:
        return devices
    hosts = {m.group(1) for p in paths if (m := _HOST.match(os.path.basename(p)))}
    if len(hosts) > 1 and len(paths) % len(hosts) == 0:
        return len(paths) // len(hosts)
    return None
