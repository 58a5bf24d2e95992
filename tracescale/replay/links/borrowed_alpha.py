"""Fitted alpha-beta per (type, algorithm_protocol, tier) + each key's rows -> the same fits,
with a latency the key's own rows cannot identify combined with a better-measured donor's.

Why: the latency is an intercept. A key whose rows hold one group size, or a few large
messages, reads it from transfers it is a few % of, and 5% noise per instance puts it anywhere
from 0 to twice its value (``replay.links.alpha_beta``). Projecting to 8x the measured world
multiplies that latency by the hop count, so the error lands in the projection (a hybrid data-
parallel AllReduce over RING_LL read 3x too small: +24% at 8x). The rows of the same collective
type and protocol over the other algorithms, or of the type at that tier over every algorithm,
usually measure it well; failing both, the tier's link read from every other collective type
over it (an all-to-all over nodes seen at one size borrows the latency the AllReduce buckets
over the same network measured at many sizes), where the type's latency inside a node is the
link's there (a type with a latency of its own keeps it). Per-hop latency depends on the
protocol (LL, LL128, Simple each have their own in NCCL's cost model) far more than on ring vs
tree, so a donor of the same protocol is taken first; the type's whole tier otherwise. An
inter-node key with none of these (the tier measured at one group size, one protocol, one
collective type) is given the plausible inter-node range as its donor, read from the well-
measured intra-node latency: between that latency (not growing across nodes) and it times the
measured bandwidth ratio (growing like bandwidth shrinks), its point at the ratio to the power
2/3, the range taken as its 90% range. NCCL's own cost model puts the network's per-hop latency
at 3-6x NVLink's (2.7-9.6 vs 0.5-3.4 us) where its bandwidth is 6-12x lower: inside that range.

The rule: a weak key (``AlphaBeta.weak``) whose latency has no standard error takes the
donor's alpha; one with a standard error is combined with the donor's by their precisions,
unless the two differ by more than three joint standard errors: then the key's own
latency is real and stays. Beta is refitted on the key's own rows at the new alpha (the
bandwidth of a key is measured well even when its latency is not). The interval keeps both
readings: its ends span the donor's range, the key's own range and the combination. So the
donor moves the point and never narrows the interval: that the two latencies are one is an
assumption the rows cannot confirm (a donor pooled over protocols of different bandwidths
reads its latency biased and its standard error too small; narrowing to it lost the truth
on multi-node studies at 2x-8x).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from tracescale.replay.links.alpha_beta import AlphaBeta, between_tiers, fit_rows, refit_beta
from tracescale.replay.links.topology import INTRA
from tracescale.scaling.quantiles import Z95
from tracescale.table import concat

Key = tuple[str, str, str]
#: Own and donor latencies further apart than this many joint standard errors are two
#: different latencies, not two readings of one.
_CONSISTENT = 3.0


def protocol_of(algo: str) -> str:
    """The protocol part of an algorithm/protocol label (``RING_LL128`` -> ``LL128``), '' when
    the label carries none."""
    for proto in ("LL128", "LL", "SIMPLE"):
        if algo.upper().endswith(proto):
            return proto
    return ""


def borrow_alpha(
    fits: Mapping[Key, AlphaBeta],
    own_rows: Mapping[Key, Any],
    faster: Mapping[Key, AlphaBeta] | None = None,
) -> tuple[dict[Key, AlphaBeta], list[str]]:
    """``fits`` with every weak (or unfitted) level-3 key's latency combined with its donor's,
    and the assumptions that states; ``own_rows``: each (type, algo, tier) key's rows;
    ``faster``: for the inter-node keys, the intra-node link of the same key (the plausible
    range's start), where one was fitted."""
    faster = faster or {}
    out = dict(fits)
    notes: list[str] = []
    for key, rows in own_rows.items():
        own = fits.get(key)
        if own is not None and not own.weak():
            continue
        donor, donor_name = _donor(key, fits, own_rows)
        if donor is None and own is not None and own.alpha_se is not None and key in faster:
            # (a key with no reading of its own was given this very range by fit_rows)
            donor, donor_name = _plausible(faster[key], rows)
        if donor is None or donor.alpha_se is None:
            continue
        got = _combine(own, donor, rows)
        if got is None:
            continue
        source = f"{own.source if own else '/'.join(key)}+alpha:{donor_name}"
        out[key] = replace(got, source=source)
        notes.append(_note(key, own, donor_name, out[key]))
    return out, notes


def _donor(
    key: Key, fits: Mapping[Key, AlphaBeta], own_rows: Mapping[Key, Any]
) -> tuple[AlphaBeta | None, str]:
    """The better-measured latency for ``key``: the same type, tier and protocol pooled over
    every algorithm, else the type's fit at that tier over every algorithm; one that is
    itself weak, or pools no other key's rows, is none."""
    ctype, algo, tier = key
    proto = protocol_of(algo)
    if proto:
        same = [
            rows
            for (c, a, t), rows in own_rows.items()
            if c == ctype and t == tier and protocol_of(a) == proto
        ]
        if len(same) > 1:
            pooled = fit_rows(concat(same))
            if pooled is not None and pooled.alpha_se is not None and not pooled.weak():
                return pooled, f"{ctype}/*_{proto}/{tier}"
    parent = fits.get((ctype, "", tier))
    siblings = sum(1 for c, _, t in own_rows if c == ctype and t == tier)
    if parent is not None and parent.alpha_se is not None and not parent.weak() and siblings > 1:
        return parent, f"{ctype}/{tier}"
    # The link itself, read from the other collective types over the same tier: a per-hop
    # latency is the network's (NIC, switch, proxy), which an all-to-all over nodes measured at
    # one size shares with the AllReduce buckets measured at many. Only where the tier pools
    # other types' rows, so the donor is not the key's own reading again.
    # A type with a latency of its own inside a node (a broadcast of Python objects, 30x the
    # ring's per-hop latency) has one across nodes too: the link's is not its reading.
    link = fits.get(("", "", tier))
    others = any(c != ctype for c, _, t in own_rows if t == tier)
    mine, theirs = fits.get((ctype, "", INTRA)), fits.get(("", "", INTRA))
    if link is None or link.alpha_se is None or link.weak() or not others or tier == INTRA:
        return None, ""
    if mine is not None and theirs is not None and not _alike(mine.alpha_s, theirs.alpha_s):
        return None, ""
    return link, f"*/{tier} (every collective type over that tier)"


#: Two latencies within this factor of each other are one link's (a type's own latency, such
#: as a broadcast's, differs by tens of times).
_ALIKE = 1.5


def _alike(a: float, b: float) -> bool:
    return a > 0 and b > 0 and max(a, b) / min(a, b) <= _ALIKE


def _plausible(intra: AlphaBeta, rows: Any) -> tuple[AlphaBeta | None, str]:
    """The plausible inter-node latency for ``rows`` as a reading with a standard error, from
    an intra-node link that is itself well measured; none otherwise."""
    if intra.alpha_se is None or intra.weak():
        return None, ""
    got = between_tiers(rows, intra)
    lo, hi = got.at(-1)[0], got.at(1)[0]
    if hi <= lo:
        return None, ""
    name = (
        f"plausible inter-node ({lo * 1e6:.3g}-{hi * 1e6:.3g} us: the "
        f"{intra.source or 'intra-node'} latency to it times the bandwidth ratio {hi / lo:.3g})"
    )
    return replace(got, alpha_se=(hi - lo) / (2 * Z95)), name  # a 90% range: +-z95 s.e.


def _combine(own: AlphaBeta | None, donor: AlphaBeta, rows: Any) -> AlphaBeta | None:
    """The key's link at the combined latency, beta refitted on its rows, with the ends
    spanning both readings and both ranges; None where the two latencies disagree (the key
    keeps its own)."""
    d_alpha, d_se = donor.alpha_s, float(donor.alpha_se or 0.0)
    if own is None or own.alpha_se is None:
        alpha = d_alpha
    else:
        o_se = own.alpha_se
        if abs(own.alpha_s - d_alpha) > _CONSISTENT * float(np.hypot(o_se, d_se)):
            return None
        if o_se <= 0 or d_se <= 0:
            alpha = own.alpha_s if o_se <= 0 else d_alpha
        else:
            w_own, w_donor = 1.0 / o_se**2, 1.0 / d_se**2
            alpha = (w_own * own.alpha_s + w_donor * d_alpha) / (w_own + w_donor)
    readings = [alpha, donor.at(-1)[0], donor.at(1)[0]]
    if own is not None:
        readings += [own.alpha_s, own.at(-1)[0], own.at(1)[0]]
    lo, hi = max(min(readings), 0.0), max(readings)
    low = (lo, refit_beta(rows, lo)) if lo < alpha else None
    high = (hi, refit_beta(rows, hi)) if hi > alpha else None
    se = d_se if own is None or own.alpha_se is None else _joint_se(own.alpha_se, d_se)
    return AlphaBeta(alpha, refit_beta(rows, alpha), "", alt=high, low=low, alpha_se=se)


def _joint_se(a: float, b: float) -> float:
    """Standard error of the precision-weighted mean of two readings."""
    if a <= 0 or b <= 0:
        return min(a, b)
    return float(1.0 / np.sqrt(1.0 / a**2 + 1.0 / b**2))


def _note(key: Key, own: AlphaBeta | None, donor: str, got: AlphaBeta) -> str:
    ctype, algo, tier = key
    lo, hi = got.at(-1)[0], got.at(1)[0]
    mine = (
        "no latency of their own"
        if own is None
        else f"{own.alpha_s * 1e6:.3g} us, 90% range {own.at(-1)[0] * 1e6:.3g}-"
        f"{own.at(1)[0] * 1e6:.3g} us"
    )
    how = "taken from" if own is None or own.alpha_se is None else "combined with"
    return (
        f"{tier}-node {ctype} {algo} latency {got.alpha_s * 1e6:.3g} us per hop: its own rows "
        f"give {mine}, so it is {how} the {donor} latency (the donors in order: the same "
        "protocol, the type at that tier, the tier's link over every type, the plausible "
        "inter-node range); bandwidth refitted "
        f"on its own rows; 90% range {lo * 1e6:.3g}-{hi * 1e6:.3g} us, the intervals replay "
        "both ends"
    )
