"""Topology tiers follow each process group's members: measured, and projected to a new N
through the group's layout (stride that stays or grows like N)."""

from __future__ import annotations

import pandas as pd
import pytest

from tracescale.replay.laws.links import fit_comm, group_laws
from tracescale.replay.laws.topology import (
    INTER,
    INTRA,
    Layout,
    group_layouts,
    measured_tier,
    tier_at,
)
from tracescale.scaling.comm import factors


@pytest.mark.parametrize(
    ("group", "pg", "tier"),
    [
        (2, "1:0,1", INTRA),
        (2, "1:6,7", INTRA),
        (2, "1:7,8", INTER),  # a pair straddling two nodes
        (2, "2:0,8", INTER),  # data parallel across tensor-parallel groups: small, strided
        (8, "0:0-7", INTRA),
        (16, "0:0-15", INTER),
        (4, "3:0-12/4", INTER),
        (4, "3:0-3", INTRA),
        (16, "0", INTER),  # members unknown: by size, as before
        (8, "0", INTRA),
        (32, "0:0...", INTER),  # a cut list: by size
    ],
)
def test_measured_tier_follows_members(group: int, pg: str, tier: str) -> None:
    assert measured_tier(group, pg, 8) == tier
    assert measured_tier(group, pg, None) == INTRA


def _rows(spec: list[tuple[int, str, int]]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"world_size": n, "pg": pg, "group": g} for n, pg, g in spec],
    )


def test_layouts_from_several_runs_are_measured() -> None:
    rows = _rows(
        [
            (4, "1:0,1", 2), (8, "1:2,3", 2),  # contiguous pairs
            (4, "2:0,2", 2), (8, "2:0-6/2", 4),  # data parallel across the pairs
            (4, "3:0,2", 2), (8, "3:0,4", 2),  # a strided pair whose stride grows
        ]
    )  # fmt: skip
    got = group_layouts(rows, {"1": False, "2": True, "3": False})
    assert got == {
        "1": Layout(1, 8, grows=False, inferred=False),
        "2": Layout(2, 8, grows=False, inferred=False),
        "3": Layout(4, 8, grows=True, inferred=False),
    }


def test_layouts_from_one_run_are_inferred() -> None:
    rows = _rows([(16, "1:0,1", 2), (16, "2:0,8", 2), (16, "3:0,4", 2), (16, "4:0-14/2", 8)])
    got = group_layouts(rows, {"1": False, "2": False, "3": False, "4": True})
    # {0,8}: fixed size, spans the world: the outer mesh dimension, its stride grows like N;
    # {0,4} spans 8 of 16 ranks: a dimension lies outside it, its stride stays
    assert got == {
        "1": Layout(1, 16, grows=False, inferred=True),
        "2": Layout(8, 16, grows=True, inferred=True),
        "3": Layout(4, 16, grows=False, inferred=True),
        "4": Layout(2, 16, grows=False, inferred=True),
    }
    assert got["2"].describe("2") == "group 2's member stride (8 at N=16) grows like N"


def test_projected_tier_follows_the_layout() -> None:
    lay = {
        "1": Layout(1, 8, False, False),
        "2": Layout(2, 8, False, False),
        "3": Layout(4, 8, True, True),
    }
    # 4 GPUs per node; tensor-parallel pairs stay inside a node at any N
    assert tier_at(2, "1:2,3", 8, 64, 4, 2, lay) == INTRA
    # data parallel {0,2,4,6} over 2 nodes at N=8; at N=4 it was {0,2}: one node
    assert tier_at(4, "2:0-6/2", 8, 8, 4, 4, lay) == INTER
    assert tier_at(4, "2:0-6/2", 8, 4, 4, 2, lay) == INTRA
    assert tier_at(4, "2:0-6/2", 8, 64, 4, 32, lay) == INTER
    # a strided pair {0,4} (stride grows): N=4 -> {0,2} inside a node, N=16 -> {0,8}
    assert tier_at(2, "3:0,4", 8, 4, 4, 2, lay) == INTRA
    assert tier_at(2, "3:0,4", 8, 16, 4, 2, lay) == INTER
    # members unknown: the size rule
    assert tier_at(2, "1", 8, 64, 4, 2, lay) == INTRA
    assert tier_at(4, "0", 4, 8, 4, 8, lay) == INTER
    # irregular members {0,1,4,5}: their tier while the size stays, else the size rule
    assert tier_at(4, "5:0-1,4-5", 8, 16, 4, 4, lay) == INTER
    assert tier_at(4, "5:0-1,4-5", 8, 2, 4, 1, lay) == INTRA
    assert tier_at(4, "5:0-1,4-5", 8, 16, 8, 4, lay) == INTRA


def test_alpha_beta_per_tier_from_small_strided_groups() -> None:
    """Pairs inside a node (10 us, 100 GB/s) and strided pairs across nodes (30 us, 20 GB/s),
    both of 2 ranks: by size they would share one tier and one blended fit; by members each
    tier gets its own link back exactly."""
    rows = []
    for pg, alpha, bw in (("1:0,1", 10e-6, 100e9), ("2:0,8", 30e-6, 20e9)):
        for nbytes in (1e5, 1e6, 1e7, 1e8):
            lat, b = factors("allreduce", pd.Series([2.0]).to_numpy(), nbytes, "ring")
            rows.append({"world_size": 16, "collective": "allreduce", "algo": "RING_SIMPLE",
                         "bytes": nbytes, "group": 2, "pg": pg,
                         "transfer": alpha * lat[0] + b[0] / bw})  # fmt: skip
    model = fit_comm(pd.DataFrame(rows), 8)
    assert model.measured_tiers == frozenset({INTRA, INTER})
    intra = model.fits[("allreduce", "RING_SIMPLE", INTRA)]
    inter = model.fits[("allreduce", "RING_SIMPLE", INTER)]
    assert intra.alpha_s == pytest.approx(10e-6, rel=1e-6)
    assert 1 / intra.inv_bw == pytest.approx(100e9, rel=1e-6)
    assert inter.alpha_s == pytest.approx(30e-6, rel=1e-6)
    assert 1 / inter.inv_bw == pytest.approx(20e9, rel=1e-6)
    # projected to 64 ranks: the strided pair's stride grows (it spans the world), it stays
    # inter-node; 1 MB over it costs what the inter-node link says
    lat, b = factors("allreduce", pd.Series([2.0]).to_numpy(), 1e6, "ring")
    want = 30e-6 * lat[0] + b[0] / 20e9
    got = model.transfer("allreduce", "RING_SIMPLE", 1e6, 2, 16, 64, pg="2:0,8")
    assert got == pytest.approx(want, rel=1e-6)
    assert model.tier_at(2, "1:0,1", 16, 64) == INTRA


def test_roles_follow_the_description_across_world_sizes() -> None:
    """DeviceMesh names each slice's group in creation order: data parallel is "3" at N=4 and
    "5" at N=8, while its description "mesh_dp" stays. By name each would be seen in one run
    (a fixed size); by description the size law and the layout are measured over both."""
    rows = _rows(
        [
            (4, "1(mesh_tp):0,1", 2), (8, "1(mesh_tp):0,1", 2),
            (4, "3(mesh_dp):0,2", 2), (8, "5(mesh_dp):0-6/2", 4),
        ]
    )  # fmt: skip
    laws = group_laws(rows)
    assert laws == {"mesh_tp": False, "mesh_dp": True}
    assert group_layouts(rows, laws) == {
        "mesh_tp": Layout(1, 8, grows=False, inferred=False),
        "mesh_dp": Layout(2, 8, grows=False, inferred=False),
    }
    bare = rows.assign(pg=rows["pg"].str.replace(r"\(mesh_\w+\)", "", regex=True))
    assert group_laws(bare) == {"1": False, "3": False, "5": False}
