"""Topology tiers follow each process group's members: measured, and projected to a new N
through the group's layout (stride that stays or grows like N)."""

from __future__ import annotations

import pandas as pd
import pytest

from tracescale.replay.links.links import fit_comm, group_laws
from tracescale.replay.links.topology import (
    INTER,
    INTRA,
    Layout,
    group_layouts,
    measured_tier,
    size_laws,
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
    # projected to 64 ranks: the strided pair spans the world (the outermost mesh dimension,
    # data parallel across the pairs), so it is the group that grows: 8 ranks 8 apart, still
    # inter-node; 1 MB over it costs what the inter-node link says
    assert model.proportional == {"1": False, "2": True}
    assert model.group_at(2, "2:0,8", 16, 64) == 8
    lat, b = factors("allreduce", pd.Series([8.0]).to_numpy(), 1e6, "ring")
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
    # by name, "3" and "5" are each seen in one run: their laws and layouts are inferred (each
    # spans the world, so each reads as growing), not measured
    bare = rows.assign(pg=rows["pg"].str.replace(r"\(mesh_\w+\)", "", regex=True))
    laws = group_laws(bare)
    assert laws == {"1": False, "3": True, "5": True}
    layouts = group_layouts(bare, laws)
    assert layouts["3"].inferred and layouts["5"].inferred and not layouts["1"].inferred


def _hsdp_rows(gpus_per_node: int, sizes: tuple[int, ...]) -> pd.DataFrame:
    """HSDP's groups as DeviceMesh names them: the shard group (contiguous, at most a node)
    at every N, the replicate group (one rank per node) where there is more than one node."""
    spec = []
    for n in sizes:
        shard = min(n, gpus_per_node)
        spec.append((n, f"{1 + shard}(mesh_dp_shard):0-{shard - 1}", shard))
        if n > shard:
            spec.append((n, f"1(mesh_dp_replicate):0-{n - shard}/{shard}", n // shard))
    return _rows(spec)


def test_hsdp_shard_group_stays_and_replicate_group_grows() -> None:
    """The shard group grows 2, 4, 8, 8 (N = 2..16) and then stays at a node: its last two runs
    say so, where first against last read it as growing. The replicate group, seen at N = 16
    only as {0, 8}, spans the world: the outermost mesh dimension, the one that grows."""
    rows = _hsdp_rows(8, (2, 4, 8, 16))
    got = size_laws(rows, 8)
    assert got.grows == {"mesh_dp_shard": False, "mesh_dp_replicate": True}
    (note,) = got.notes
    assert note.startswith("group mesh_dp_shard's size stays as from N=8 to N=16 (8 to 8 ranks)")
    assert "members span the world (stride 8 x 2 ranks = N)" in got.why["mesh_dp_replicate"]
    layouts = group_layouts(rows, got.grows, got.why)
    assert layouts["mesh_dp_replicate"] == Layout(8, 16, grows=False, inferred=True)
    said = layouts["mesh_dp_replicate"].describe("mesh_dp_replicate")
    assert said.startswith("group mesh_dp_replicate's member stride (8 at N=16) stays; its size")
    # at 4 per node the replicate group is measured at N = 8 and 16: grows, no inference
    four = size_laws(_hsdp_rows(4, (2, 4, 8, 16)), 4)
    assert four.grows == {"mesh_dp_shard": False, "mesh_dp_replicate": True}
    assert not four.notes and not four.why


def test_one_run_group_crossing_nodes_alone_grows() -> None:
    """At N = 32 with 8 per node: pairs {0, 1} inside a node, {0, 8} (not spanning the world,
    another dimension lies outside it) the only group across nodes: it is read to grow. Were
    the pairs across nodes too, the runs could not tell, and the assumptions say so."""
    got = size_laws(_rows([(32, "1:0,1", 2), (32, "2:0,8", 2)]), 8)
    assert got.grows == {"1": False, "2": True}
    assert "the only group crossing nodes while 1 stay inside one" in got.why["2"]
    assert got.notes == [
        "group 1 is measured at N=32 only (2 ranks): the runs cannot tell whether its size "
        "grows; it stays"
    ]
    both = size_laws(_rows([(32, "1:7,8", 2), (32, "2:0,8", 2)]), 8)
    assert both.grows == {"1": False, "2": False}
    assert len(both.notes) == 2
    # without the node layout only the world rules apply
    assert size_laws(_rows([(32, "1:0,1", 2), (32, "2:0,8", 2)])).grows == {"1": False, "2": False}
