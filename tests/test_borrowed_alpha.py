"""A (type, algorithm_protocol, tier) key whose own rows cannot identify its latency combines
it with a better-measured donor's: the same type and protocol over every algorithm, else the
type at that tier, else the tier's link read from every other type over it. Its bandwidth stays
its own; the interval spans both readings.

An inter-node key with no such donor (the tier measured at one group size, one protocol)
combines its latency with the plausible inter-node range read from the intra-node link.

Why: the hybrid study's data-parallel AllReduce over RING_LL, read from one group size of
large messages, fitted a third of its latency and projected +24% at 8x the largest N.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracescale.replay.links.alpha_beta import AlphaBeta, between_tiers, fit_rows
from tracescale.replay.links.borrowed_alpha import borrow_alpha, protocol_of
from tracescale.replay.links.links import fit_comm
from tracescale.replay.links.topology import INTER, INTRA
from tracescale.scaling.comm import factors

ALPHA, BANDWIDTH = 10e-6, 100e9
TREE = ("allreduce", "TREE", INTRA)
#: a well-measured sibling key: left alone
_STRONG = AlphaBeta(ALPHA, 1 / BANDWIDTH, "t", low=(9e-6, 1e-11), alt=(11e-6, 1e-11), alpha_se=5e-7)


def _rows(
    algo: str,
    groups: list[int],
    sizes: list[float],
    noise: float,
    seed: int,
    link: tuple[float, float] = (ALPHA, BANDWIDTH),
) -> pd.DataFrame:
    """AllReduce instances at every (group, size) pair, transfers from the true ``link``
    (alpha, bandwidth) with gamma noise of ``noise`` (coefficient of variation; 0 exact)."""
    rng = np.random.default_rng(seed)
    pairs = [(g, b) for g in groups for b in sizes]
    fam = "tree" if algo.startswith("TREE") else "ring"
    true = []
    for g, b in pairs:
        lat, bw = factors("allreduce", np.asarray([float(g)]), b, fam)
        true.append(link[0] * lat[0] + bw[0] / link[1])
    k = 1 / noise**2 if noise else 0.0
    draws = rng.gamma(k, 1 / k, len(pairs)) if noise else np.ones(len(pairs))
    return pd.DataFrame(
        {
            "world_size": [g for g, _ in pairs],
            "collective": "allreduce",
            "algo": algo,
            "bytes": [b for _, b in pairs],
            "group": [g for g, _ in pairs],
            "transfer": np.asarray(true) * draws,
            "pg": "0",
        }
    )


def test_protocol_is_the_labels_last_token() -> None:
    assert [protocol_of(a) for a in ("RING_LL", "TREE_LL128", "RING_SIMPLE", "RING", "")] == [
        "LL",
        "LL128",
        "SIMPLE",
        "",
        "",
    ]


def test_weak_means_a_range_wider_than_twice_or_reaching_zero() -> None:
    assert not AlphaBeta(10e-6, 1e-11, "", low=(6e-6, 1e-11), alt=(11e-6, 1e-11)).weak()
    assert AlphaBeta(10e-6, 1e-11, "", low=(4e-6, 1e-11), alt=(11e-6, 1e-11)).weak()
    assert AlphaBeta(10e-6, 1e-11, "", low=(0.0, 1e-11), alt=(11e-6, 1e-11)).weak()
    assert not AlphaBeta(10e-6, 1e-11, "").weak()


def test_weak_key_is_combined_with_the_parent_by_precision() -> None:
    """Own 20 +- 8 us, parent 10 +- 2 us: 3 joint standard errors apart at most, so the
    precision-weighted mean (20/64 + 10/4) / (1/64 + 1/4) = 180/17 us; beta refitted on the
    key's own rows; the ends span the parent's range and the key's own range (0-40 us): the
    combination moves the point, never narrows the interval."""
    own_rows = _rows("RING", [8], [50e6, 100e6], 0.0, 1)
    other = _rows("TREE", [2, 4, 8], [1e5, 1e6], 0.0, 2)
    own = AlphaBeta(20e-6, 1e-11, "allreduce/RING/intra", low=(0.0, 1e-11), alt=(40e-6, 1e-11))
    own = AlphaBeta(**{**own.__dict__, "alpha_se": 8e-6})
    parent = AlphaBeta(10e-6, 1e-11, "p", low=(7e-6, 1e-11), alt=(13e-6, 1e-11), alpha_se=2e-6)
    fits = {("allreduce", "RING", INTRA): own, ("allreduce", "", INTRA): parent, TREE: _STRONG}
    rows = {("allreduce", "RING", INTRA): own_rows, TREE: other}
    out, notes = borrow_alpha(fits, rows)
    got = out[("allreduce", "RING", INTRA)]
    assert got.alpha_s == pytest.approx(180e-6 / 17, rel=1e-12)
    assert got.at(-1)[0] == 0.0 and got.at(1)[0] == pytest.approx(40e-6)
    assert got.source == "allreduce/RING/intra+alpha:allreduce/intra"
    # exact rows of the true link: beta at alpha 10.6 us is a hair under the true 1/BANDWIDTH
    assert 1 / got.inv_bw == pytest.approx(BANDWIDTH, rel=0.01)
    assert len(notes) == 1 and "combined with the allreduce/intra latency" in notes[0]
    assert out[("allreduce", "", INTRA)] is parent


def test_latencies_that_disagree_keep_their_own() -> None:
    """Own 100 +- 20 us against 10 +- 2 us: 90 us apart, more than 3 * hypot(20, 2)."""
    own = AlphaBeta(100e-6, 1e-11, "o", low=(10e-6, 1e-11), alt=(190e-6, 1e-11), alpha_se=20e-6)
    parent = AlphaBeta(10e-6, 1e-11, "p", low=(7e-6, 1e-11), alt=(13e-6, 1e-11), alpha_se=2e-6)
    fits = {("allreduce", "RING", INTRA): own, ("allreduce", "", INTRA): parent, TREE: _STRONG}
    rows = {
        ("allreduce", "RING", INTRA): _rows("RING", [8], [50e6], 0.0, 1),
        TREE: _rows("TREE", [2, 4], [1e5], 0.0, 2),
    }
    out, notes = borrow_alpha(fits, rows)
    assert out[("allreduce", "RING", INTRA)] is own and notes == []


def test_unfitted_key_takes_the_donor_latency_and_its_own_bandwidth() -> None:
    """One message mix fits nothing of its own: the donor's alpha, beta from its rows."""
    own_rows = _rows("RING", [8], [64e6], 0.0, 1)
    parent = AlphaBeta(ALPHA, 1 / 50e9, "p", low=(8e-6, 1e-11), alt=(12e-6, 1e-11), alpha_se=1e-6)
    fits = {("allreduce", "", INTRA): parent}
    rows = {
        ("allreduce", "RING", INTRA): own_rows,
        ("allreduce", "TREE", INTRA): _rows("TREE", [2, 4], [1e5], 0.0, 2),
    }
    got = borrow_alpha(fits, rows)[0][("allreduce", "RING", INTRA)]
    assert got.alpha_s == ALPHA
    assert 1 / got.inv_bw == pytest.approx(BANDWIDTH, rel=1e-9)  # its own, not the parent's
    assert "taken from" in borrow_alpha(fits, rows)[1][0]


def test_a_key_alone_at_its_tier_borrows_nothing() -> None:
    """The parent then holds the same rows: no second reading."""
    own = fit_rows(_rows("RING_LL", [8], [50e6, 100e6], 0.05, 4))
    assert own is not None
    fits = {("allreduce", "RING_LL", INTRA): own, ("allreduce", "", INTRA): own}
    rows = {("allreduce", "RING_LL", INTRA): _rows("RING_LL", [8], [50e6, 100e6], 0.05, 4)}
    assert borrow_alpha(fits, rows)[0] == fits


@pytest.mark.parametrize("seed", range(1, 11))
def test_fit_comm_borrows_the_same_protocol_over_algorithms(seed: int) -> None:
    """RING_LL at one group size of large messages (5% noise) cannot place a 10 us latency;
    TREE_LL over group sizes 2-8 and small messages measures it: the RING_LL key's latency
    lands within 20% of the truth and its interval covers the truth."""
    weak = pd.concat(
        [_rows("RING_LL", [8], [100e6, 200e6, 300e6], 0.05, 10 * seed + i) for i in range(3)]
    )
    strong = _rows("TREE_LL", [2, 4, 8], [1e4, 1e5, 1e6], 0.05, seed + 20)
    model = fit_comm(pd.concat([weak, strong], ignore_index=True), gpus_per_node=8)
    own = fit_rows(weak)
    assert own is not None and own.weak()
    got = model.fits[("allreduce", "RING_LL", INTRA)]
    assert "+alpha:allreduce/*_LL/intra" in got.source
    assert got.alpha_s == pytest.approx(ALPHA, rel=0.2)
    assert got.at(-1)[0] <= ALPHA <= got.at(1)[0]
    assert any("RING_LL latency" in a and "combined with" in a for a in model.assumptions)


#: The cross-node hybrid study's links: 20 us / 50 GB/s inside a node, 60 us / 12.5 GB/s across.
INTRA_LINK, INTER_LINK = (20e-6, 50e9), (60e-6, 12.5e9)
SLOW = ("allreduce", "RING_SIMPLE", INTER)


def _one_inter_size(seed: int) -> pd.DataFrame:
    """12 instances of 100 and 200 MB over one 4-rank group across nodes, 5% noise each."""
    return pd.concat(
        [_rows("RING_SIMPLE", [4], [200e6, 200e6, 100e6], 0.05, seed * 7 + i, INTER_LINK)
         for i in range(4)],
        ignore_index=True,
    )  # fmt: skip


def test_weak_inter_key_is_combined_with_the_plausible_range() -> None:
    """The plausible reading runs from the intra-node latency to it times the bandwidth ratio
    (about 4 here), its point at the ratio to the power 2/3, its 90% range read as +-1.645 standard
    errors; the two readings are combined by their precisions and the interval spans both."""
    rows = _one_inter_size(3)
    own = fit_rows(rows)
    assert own is not None and own.alpha_se is not None and own.weak()
    intra = AlphaBeta(INTRA_LINK[0], 1 / INTRA_LINK[1], "allreduce/intra", alpha_se=1e-6)
    plausible = between_tiers(rows, intra)
    lo, hi = plausible.at(-1)[0], plausible.at(1)[0]
    assert lo == INTRA_LINK[0] and 3.5 < hi / lo < 4.5
    assert plausible.alpha_s == pytest.approx(lo ** (1 / 3) * hi ** (2 / 3), rel=1e-6)
    se = (hi - lo) / (2 * 1.6448536269514722)
    assert abs(own.alpha_s - plausible.alpha_s) < 3 * np.hypot(own.alpha_se, se)
    w_own, w_plausible = own.alpha_se**-2, se**-2
    expect = (w_own * own.alpha_s + w_plausible * plausible.alpha_s) / (w_own + w_plausible)
    out, notes = borrow_alpha({SLOW: own}, {SLOW: rows}, {SLOW: intra})
    got = out[SLOW]
    assert got.alpha_s == pytest.approx(expect, rel=1e-9)
    assert got.at(-1)[0] == min(lo, own.at(-1)[0]) and got.at(1)[0] == max(hi, own.at(1)[0])
    assert "+alpha:plausible inter-node (20-" in got.source
    assert len(notes) == 1 and "inter-node allreduce RING_SIMPLE latency" in notes[0]


def test_no_plausible_reading_from_a_weak_intra_link() -> None:
    """The range starts from the intra-node latency: one that is itself a guess gives none."""
    rows = _one_inter_size(3)
    own = fit_rows(rows)
    assert own is not None and own.weak()
    guess = AlphaBeta(20e-6, 2e-11, "g", low=(0.0, 2e-11), alt=(50e-6, 2e-11), alpha_se=15e-6)
    assert borrow_alpha({SLOW: own}, {SLOW: rows}, {SLOW: guess})[0][SLOW] is own


def test_fit_comm_reads_one_inter_node_size_near_the_truth() -> None:
    """Intra-node pairs measured over 10 kB-8 MB place 20 us well; the inter-node key, 12
    instances of one 4-rank group at 2 ranks per node, reads its own latency anywhere from 0
    to 5x the true 60 us (seeds 1-10: 0-308 us). Combined with the plausible range (about
    20-80 us) it lands within 45% of the truth on every seed (measured: 36-49 us), closer than
    its own reading on at least 7 of 10, and its interval covers the truth."""
    closer = 0
    for seed in range(1, 11):
        intra = _rows("RING_SIMPLE", [2], [1e4, 1e5, 1e6, 8e6], 0.05, seed + 50, INTRA_LINK)
        inter = _one_inter_size(seed)
        model = fit_comm(pd.concat([intra, inter], ignore_index=True), gpus_per_node=2)
        assert model.fits[("allreduce", "RING_SIMPLE", INTRA)].alpha_s == pytest.approx(20e-6, 0.1)
        own = fit_rows(inter)
        assert own is not None
        got = model.fits[SLOW]
        assert got.alpha_s == pytest.approx(INTER_LINK[0], rel=0.45), seed
        assert got.at(-1)[0] <= INTER_LINK[0] <= got.at(1)[0], seed
        closer += abs(got.alpha_s - INTER_LINK[0]) < abs(own.alpha_s - INTER_LINK[0])
    assert closer >= 7


def _alltoall_rows(group: int, nbytes: float, count: int, seed: int) -> pd.DataFrame:
    """``count`` all-to-alls of one rank's ``nbytes`` over one ``group`` across nodes, on the
    inter-node link, 3% noise each: one (latency, bytes) mix."""
    lat, bw = factors("alltoall", np.asarray([float(group)]), nbytes, "ring")
    true = INTER_LINK[0] * lat[0] + bw[0] / INTER_LINK[1]
    draws = np.random.default_rng(seed).gamma(1 / 0.03**2, 0.03**2, count)
    return pd.DataFrame(
        {
            "world_size": group,
            "collective": "alltoall",
            "algo": "RING_SIMPLE",
            "bytes": nbytes,
            "group": group,
            "transfer": true * draws,
            "pg": "0",
        }
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_alltoall_seen_at_one_size_takes_the_links_latency_from_the_allreduces(
    seed: int,
) -> None:
    """A mixture-of-experts job measured across nodes at one world size: its all-to-alls hold
    one (latency, bytes) mix, so their own rows cannot split the per-peer latency from the
    bandwidth (the plausible range from the intra-node link put it at the intra-node 20 us,
    a third of the truth, and projected +46% at 4x). The AllReduce buckets over the same
    network, measured from 1 to 64 MB, read the link's latency: the all-to-all borrows it and
    lands within 10% of the true 60 us, its bandwidth within 10% of the truth, its interval
    covering the truth."""
    intra = _rows("RING_SIMPLE", [2, 4, 8], [1e4, 1e5, 1e6, 8e6], 0.03, seed + 50, INTRA_LINK)
    buckets = _rows("RING_SIMPLE", [16], [1e6, 4e6, 16e6, 64e6], 0.03, seed + 60, INTER_LINK)
    a2a = _alltoall_rows(16, 524_288.0, 24, seed)
    model = fit_comm(pd.concat([intra, buckets, a2a], ignore_index=True), gpus_per_node=8)
    got = model.fits[("alltoall", "RING_SIMPLE", INTER)]
    assert "+alpha:*/inter" in got.source
    assert got.alpha_s == pytest.approx(INTER_LINK[0], rel=0.10)
    assert 1 / got.inv_bw == pytest.approx(INTER_LINK[1], rel=0.10)
    assert got.at(-1)[0] <= INTER_LINK[0] <= got.at(1)[0]
    assert any("every type" in a and "alltoall" in a for a in model.assumptions)


def _typed_rows(
    ctype: str, groups: list[int], sizes: list[float], link: tuple[float, float], seed: int
) -> pd.DataFrame:
    """Instances of ``ctype`` at every (group, size) pair on ``link``, 3% noise each."""
    rng = np.random.default_rng(seed)
    pairs = [(g, b) for g in groups for b in sizes for _ in range(3)]
    true = []
    for g, b in pairs:
        lat, bw = factors(ctype, np.asarray([float(g)]), b, "ring")
        true.append(link[0] * lat[0] + bw[0] / link[1])
    return pd.DataFrame(
        {
            "world_size": [g for g, _ in pairs],
            "collective": ctype,
            "algo": "RING_LL",
            "bytes": [b for _, b in pairs],
            "group": [g for g, _ in pairs],
            "transfer": np.asarray(true) * rng.gamma(1 / 0.03**2, 0.03**2, len(pairs)),
            "pg": "0",
        }
    )


def test_a_type_with_a_latency_of_its_own_does_not_take_the_links() -> None:
    """A broadcast of Python objects costs 300 us per hop inside a node, 30x the ring's 10 us:
    seen across nodes at one size, it keeps a latency of its own (taking the AllReduce
    buckets' link latency read it 30x too small and projected an HSDP job +155% at 8x)."""
    intra_ar = _rows("RING_SIMPLE", [2, 4, 8], [1e4, 1e5, 1e6, 8e6], 0.03, 51, INTRA_LINK)
    buckets = _rows("RING_SIMPLE", [16], [1e6, 4e6, 16e6, 64e6], 0.03, 61, INTER_LINK)
    bcast_intra = _typed_rows("broadcast", [2, 4, 8], [4096.0, 65536.0], (300e-6, 8.6e8), 7)
    bcast_inter = _typed_rows("broadcast", [16], [4096.0], (300e-6, 2e7), 8)
    frame = pd.concat([intra_ar, buckets, bcast_intra, bcast_inter], ignore_index=True)
    model = fit_comm(frame, gpus_per_node=8)
    got = model.fits[("broadcast", "RING_LL", INTER)]
    assert "*/inter" not in got.source
    assert got.alpha_s > 100e-6
