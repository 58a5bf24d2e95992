"""Collective transfer times per collective type, algorithm/protocol and topology tier.

``transfer = alpha * L(type, g) + beta * B(type, g, bytes)`` (ring/tree factors of
:func:`tracescale.scaling.comm.factors`), fitted by NNLS separately for every
(type, algorithm_protocol, tier) that has at least two distinct (latency, bytes) factor
pairs; otherwise the fit falls back to (type, tier), then (tier), then the whole study, then
the documented defaults. A tiny Broadcast therefore no longer drags an AllReduce's latency,
and intra- and inter-node links get their own alpha and beta when both were measured. An
inter-node tier neither measured nor supplied keeps the intra-node link as its point estimate
and the slowest plausible inter-node link as its alternative, so the intervals cover it.
Message bytes are max(In, Out) nelems (the full tensor of AllGather/ReduceScatter); how they
change with N is measured per type: sharded (bytes ~ 1/N) or replicated (constant). How a
process group's size changes with N is measured per group role over the runs: proportional
to N (data parallel across tensor-parallel pairs) or constant (the pairs themselves), from
the trend of its last two runs; a group seen in one run only grows with N when it holds or
spans the world or is the only one crossing nodes (``replay.links.topology.size_laws``). Its
tier follows its members (``replay.links.topology``). The fit is robust: rows far off
it (a transfer time joined onto the wrong instance, a stalled kernel) are weighted down.
Each fit carries the ends of alpha's 90% range (``replay.links.alpha_beta``): the projections
replay both, and where the range is wide (one group size, one message mix) the assumptions
say so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tracescale.groups import group_codes, group_mean, series_mean
from tracescale.ingest.groups import key_role
from tracescale.replay.links.alpha_beta import LATENCY_EXPONENT, AlphaBeta, fit_rows, weak_note
from tracescale.replay.links.borrowed_alpha import borrow_alpha
from tracescale.replay.links.topology import (
    INTER,
    INTRA,
    Layout,
    group_layouts,
    measured_tier,
    size_laws,
    tier_at,
)
from tracescale.scaling.comm import DEFAULT_ALPHA_S, DEFAULT_BANDWIDTH
from tracescale.table import Table, as_table, groupby, text

#: Plausible inter-node link when that tier was never measured and the user gave no figures
#: (docs/DESIGN.md "Unmeasured topology tier"). The point estimate keeps the intra-node link;
#: the interval reaches a link this much slower. Bandwidth per GPU: NVLink 3/4 carries 300/450
#: GB/s per direction, one HDR/NDR InfiniBand NIC per GPU 25/50 GB/s: 1/12 (DGX A100) to 1/9
#: (DGX H100) of the intra-node bandwidth. Per-hop ring latency in NCCL's own cost model: 2.7,
#: 4.0, 9.6 us over the network vs 0.47, 1.9, 3.4 us over NVLink (LL, LL128, Simple): <= 6x.
UNMEASURED_INTER_BANDWIDTH_FLOOR = 1.0 / 12.0
UNMEASURED_INTER_LATENCY_CEILING = 6.0


def unmeasured_inter_range() -> str:
    """The plausible inter-node range the intervals cover, in words (warnings, assumptions)."""
    return (
        f"the 90% interval spans inter-node links from equal to the intra-node one down to "
        f"1/{1 / UNMEASURED_INTER_BANDWIDTH_FLOOR:.0f} of its bandwidth with "
        f"{UNMEASURED_INTER_LATENCY_CEILING:.0f}x its latency (InfiniBand/RoCE vs NVLink per GPU)"
    )


#: Answers a model remembers before it starts over.
_MEMO_MAX = 1 << 16


@dataclass(frozen=True)
class CommModel:
    """Fitted alpha-beta per key, the bytes law per type, and what had to be assumed."""

    fits: Mapping[tuple[str, str, str], AlphaBeta]
    sharded: Mapping[str, bool]
    gpus_per_node: int | None
    measured_tiers: frozenset[str]
    user_inter: AlphaBeta | None = None
    #: the inter-node link read from a pipeline's send/recv hops across nodes where no
    #: collective crossed nodes (:func:`hop_link`); None without such hops
    hop_inter: AlphaBeta | None = None
    barrier_s: float = 0.0
    assumptions: tuple[str, ...] = field(default_factory=tuple)
    #: process group role (description, else name) -> its size grows like N (else it stays)
    proportional: Mapping[str, bool] = field(default_factory=dict)
    #: process group role -> how its members lie among the ranks (``replay.links.topology``)
    layouts: Mapping[str, Layout] = field(default_factory=dict)
    #: transfer times and group sizes already worked out, by their arguments: a projection asks
    #: for every collective instance of every step, and the instances of one step repeat in
    #: the next, so 1,500 steps asked the same few questions 500,000 times
    _memo: dict[tuple[object, ...], float] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def tier_at(self, group: float, pg: str, ref_n: int, n: int) -> str:
        """Tier at ``n`` ranks of an instance of ``group`` ranks measured at ``ref_n``."""
        size = self.group_at(group, pg, ref_n, n)
        return tier_at(group, pg, ref_n, n, self.gpus_per_node, size, self.layouts)

    def group_at(self, group: float, pg: str, ref_n: int, n: int) -> float:
        """Size at ``n`` ranks of a group of ``group`` ranks measured at ``ref_n``."""
        key = ("group", group, pg, ref_n, n)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._remember(key, self._group_at(group, pg, ref_n, n))
        return hit

    def _group_at(self, group: float, pg: str, ref_n: int, n: int) -> float:
        grows = self.proportional.get(key_role(pg)) if pg else None
        if grows is None:
            grows = group >= ref_n
        return group * n / ref_n if grows else group

    def lookup(self, ctype: str, algo: str, tier: str) -> AlphaBeta:
        if tier == INTER and INTER not in self.measured_tiers:
            if self.user_inter is not None:
                return self.user_inter
            if self.hop_inter is not None:
                return self.hop_inter
            return _unmeasured_inter(self._lookup(ctype, algo, INTRA))
        return self._lookup(ctype, algo, tier)

    def _lookup(self, ctype: str, algo: str, tier: str) -> AlphaBeta:
        for key in ((ctype, algo, tier), (ctype, "", tier), ("", "", tier)):
            if key in self.fits:
                return self.fits[key]
        for key in ((ctype, algo, INTRA), (ctype, "", INTRA), ("", "", INTRA), ("", "", "")):
            if key in self.fits:
                return self.fits[key]
        return AlphaBeta(DEFAULT_ALPHA_S, 1.0 / DEFAULT_BANDWIDTH, "default")

    def ends(self) -> tuple[int, ...]:
        """The ends (-1 low, +1 high) some alpha-beta used here has (a replay each)."""
        given = [f for f in (self.user_inter, self.hop_inter) if f is not None]
        fits = [*self.fits.values(), *given]
        if self.gpus_per_node is not None and INTER not in self.measured_tiers and not given:
            fits.append(_unmeasured_inter(self._lookup("", "", INTRA)))
        return tuple(
            k for k, has in ((-1, any(f.low for f in fits)), (1, any(f.alt for f in fits))) if has
        )

    def transfer(
        self,
        ctype: str,
        algo: str,
        nbytes: float,
        group: float,
        ref_n: int,
        n: int,
        end: int = 0,
        pg: str = "",
    ) -> float:
        """Transfer seconds of an instance measured at ``ref_n`` when the world has ``n`` ranks
        (``pg``: its process group, whose size law was measured; ``end``: -1/+1 take every
        alpha-beta at the low/high end of its range)."""
        key = ("transfer", ctype, algo, nbytes, group, ref_n, n, end, pg)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._remember(key, self._transfer(ctype, algo, nbytes, group, ref_n, n, end, pg))
        return hit

    def _remember(self, key: tuple[object, ...], value: float) -> float:
        """Keep ``value`` under ``key``, the memo bounded (distinct instances in every group of
        a million would otherwise fill it)."""
        if len(self._memo) >= _MEMO_MAX:
            self._memo.clear()
        self._memo[key] = value
        return value

    def _transfer(
        self, ctype: str, algo: str, nbytes: float, group: float, ref_n: int, n: int, end: int,
        pg: str,
    ) -> float:  # fmt: skip
        if ctype == "barrier":
            return self.barrier_s if group > 1 else 0.0
        g = self.group_at(group, pg, ref_n, n)
        b = nbytes * ref_n / n if self.sharded.get(ctype, False) else nbytes
        tier = tier_at(group, pg, ref_n, n, self.gpus_per_node, g, self.layouts)
        return self.lookup(ctype, algo, tier).time(ctype, b, g, algo, end)


def _unmeasured_inter(intra: AlphaBeta) -> AlphaBeta:
    """The intra-node link as the point estimate of a never-measured inter-node tier, with the
    slowest plausible inter-node link as the other end of the interval."""
    slow = (
        intra.alpha_s * UNMEASURED_INTER_LATENCY_CEILING,
        intra.inv_bw / UNMEASURED_INTER_BANDWIDTH_FLOOR,
    )
    return AlphaBeta(intra.alpha_s, intra.inv_bw, intra.source, alt=slow)


def hop_link(comm: CommModel, hop: tuple[float, float] | None) -> CommModel:
    """``comm`` with its inter-node link read from a pipeline's hops across nodes (``hop``:
    one activation's seconds and bytes, ``laws.p2p.crossing_hop``) where no collective crossed
    nodes and the user gave no figures; ``comm`` itself otherwise.

    Why: a stage-major pipeline (a stage's DP replicas on consecutive ranks) keeps its DP
    groups inside a node while DP fits in one, and its stage boundaries already cross nodes.
    The targets' DP groups then cross nodes too, and the intra-node link assumed for them
    read a pipeline at DP = 64 over 8-GPU nodes 16% fast. One send is one message over the
    network: ``alpha + B / bandwidth``, its latency placed between the tiers as an unmeasured
    one is (``alpha_beta.between_tiers``: the intra-node latency times the bandwidth ratio to
    the 2/3). The point moves to that link; the interval keeps the intra-node link at its fast
    end and the unmeasured floor at its slow end (the hop is one message between two GPUs,
    not the collectives' own algorithm)."""
    if hop is None or comm.gpus_per_node is None or INTER in comm.measured_tiers:
        return comm
    if comm.user_inter is not None or ("", "", INTRA) not in comm.fits:
        return comm
    intra = comm.fits[("", "", INTRA)]
    seconds, nbytes = hop
    inv_bw = (seconds - intra.alpha_s) / nbytes
    if inv_bw <= intra.inv_bw:  # as fast as inside a node: the intra-node link is the reading
        return comm
    alpha = intra.alpha_s * (inv_bw / intra.inv_bw) ** LATENCY_EXPONENT
    inv_bw = max((seconds - alpha) / nbytes, intra.inv_bw)
    floor = _unmeasured_inter(intra).alt or (alpha, inv_bw)
    link = AlphaBeta(
        alpha, inv_bw, "pipeline hops across nodes",
        alt=(max(floor[0], alpha), max(floor[1], inv_bw)), low=(intra.alpha_s, intra.inv_bw),
    )  # fmt: skip
    note = (
        f"no collective crossed nodes: the inter-node link is read from the pipeline's "
        f"send/recv hops across nodes ({nbytes / 1e6:.3g} MB in {seconds * 1e3:.3g} ms: "
        f"{alpha * 1e6:.3g} us latency, {1 / inv_bw / 1e9:.3g} GB/s); "
        f"{unmeasured_inter_range()}"
    )
    return replace(comm, hop_inter=link, assumptions=(*comm.assumptions, note))


def _intra_links(
    fits: Mapping[tuple[str, str, str], AlphaBeta], keys: Iterable[tuple[str, str, str]]
) -> dict[tuple[str, str, str], AlphaBeta]:
    """Per inter-node key, the intra-node link its plausible range starts from: the bandwidth of
    the same key inside a node (else the type's, else any), the latency of the first of those
    that is well measured (a borrowed intra-node key keeps its own wide range)."""
    out = {}
    for ctype, algo, _ in keys:
        chain = [fits.get(k) for k in ((ctype, algo, INTRA), (ctype, "", INTRA), ("", "", INTRA))]
        links = [f for f in chain if f is not None]
        sure = [f for f in links if f.alpha_se is not None and not f.weak()]
        if links and sure:
            out[(ctype, algo, INTER)] = replace(sure[0], inv_bw=links[0].inv_bw, low=None, alt=None)
    return out


def group_laws(instances: Any, gpus_per_node: int | None = None) -> dict[str, bool]:
    """Process group role (description, else name) -> whether its size follows N over the
    runs (else constant): :func:`tracescale.replay.links.topology.size_laws`."""
    return size_laws(instances, gpus_per_node).grows


def fit_comm(
    instances: Any,
    gpus_per_node: int | None,
    inter_bandwidth: float | None = None,
    inter_latency: float | None = None,
) -> CommModel:
    """``instances``: world_size, collective, algo, bytes, group, transfer (seconds)."""
    instances = as_table(instances)
    inst = instances[(instances.col("group") > 1) & (instances.col("bytes") >= 0)].copy()
    barrier = inst[inst.col("collective") == "barrier"]
    inst = inst[inst.col("collective") != "barrier"]
    pgs = text(inst, "pg").tolist()
    tier_of = [
        measured_tier(g, pg, gpus_per_node)
        for g, pg in zip(inst.col("group").tolist(), pgs, strict=True)
    ]
    inst["tier"] = np.array(tier_of, dtype=object) if tier_of else np.zeros(0, dtype=object)
    fits: dict[tuple[str, str, str], AlphaBeta] = {}
    notes: list[str] = []
    levels: tuple[tuple[str, ...], ...] = (
        ("collective", "algo", "tier"),
        ("collective", "tier"),
        ("tier",),
    )
    # intra first: its (borrowed) alpha is the prior for a thin inter fit
    for tier in (INTRA, INTER):
        own_rows: dict[tuple[str, str, str], Table] = {}
        for cols in levels:
            sub = inst[inst.col("tier") == tier]
            for key, rows in groupby(sub, list(cols)):
                k = tuple(str(x) for x in (key if isinstance(key, tuple) else (key,)))
                full = dict(zip(cols, k, strict=True))
                slot = (full.get("collective", ""), full.get("algo", ""), tier)
                if len(cols) == 3:
                    own_rows[slot] = rows
                prior = None
                if tier == INTER:
                    prior = fits.get((slot[0], slot[1], INTRA)) or fits.get(("", "", INTRA))
                    if prior is None:
                        prior = AlphaBeta(DEFAULT_ALPHA_S, 1.0 / DEFAULT_BANDWIDTH, "default")
                got = fit_rows(rows, prior)
                if got is not None:
                    fits[slot] = replace(got, source="/".join(k))
        faster = _intra_links(fits, own_rows) if tier == INTER else None
        borrowed, borrow_notes = borrow_alpha(fits, own_rows, faster)
        for slot, rows in own_rows.items():
            got = fits.get(slot)
            if got is not None and borrowed[slot] is got:
                notes.extend(weak_note(got, rows, slot))
        fits = borrowed
        notes.extend(borrow_notes)
    if len(inst):
        got = fit_rows(inst)
        if got is not None:
            fits[("", "", "")] = replace(got, source="all")
    sharded: dict[str, bool] = {}
    for ctype, rows in groupby(inst, "collective"):
        codes, (sizes_n,) = group_codes(rows.col("world_size"))
        per_n = group_mean(codes, rows.col("bytes"), len(sizes_n))
        if len(per_n) >= 2 and per_n[0] > 0:
            n0, n1 = float(sizes_n[0]), float(sizes_n[-1])
            expect = n0 / n1  # bytes ~ 1/N
            got_ratio = float(per_n[-1] / per_n[0])
            sharded[str(ctype)] = abs(np.log(got_ratio / expect)) < abs(np.log(got_ratio))
    tiers = frozenset(inst.col("tier").tolist())
    sizes = size_laws(instances, gpus_per_node)
    user = None
    if inter_bandwidth is not None or inter_latency is not None:
        base = fits.get(("", "", INTRA)) or AlphaBeta(DEFAULT_ALPHA_S, 1 / DEFAULT_BANDWIDTH, "")
        user = AlphaBeta(
            inter_latency if inter_latency is not None else base.alpha_s,
            1.0 / inter_bandwidth if inter_bandwidth else base.inv_bw,
            "user",
        )
    return CommModel(
        fits=fits,
        sharded=sharded,
        gpus_per_node=gpus_per_node,
        measured_tiers=tiers,
        user_inter=user,
        barrier_s=series_mean(barrier.col("transfer")) if len(barrier) else 0.0,
        assumptions=(*notes, *sizes.notes),
        proportional=sizes.grows,
        layouts=group_layouts(instances, sizes.grows, sizes.why),
    )
