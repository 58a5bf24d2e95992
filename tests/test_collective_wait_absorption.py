"""Where a collective's wait for the slowest rank runs: from its own start, unless the node
before it on its stream is a collective of the same process group.

Ranks queued behind a collective leave it together, so its group arrives together at the next
one on the stream and that one's wait may overlap the previous. HSDP's cross-node replicate
AllReduce sits behind the in-node ReduceScatter, and the next step's first AllGather behind
that AllReduce: each meets ranks that left other collectives at other times, so its measured
wait started at its kernel's start. Overlapping it with the collective before lost 4.0 ms of
a 63.6 ms step (the replay of the measured waits) and the projection fell short at every N.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.replay_capture import analyze_keeping_replay
from tracescale.replay.arrivals.slowest_rank import first_key
from tracescale.replay.engine.schedule import absorbing, replay
from tracescale.replay.graph.build import DCOLL
from tracescale.simulate import pattern_params, simulate


@pytest.fixture(scope="module")
def hsdp(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, object]:
    out = tmp_path_factory.mktemp("hsdp")
    params = pattern_params("hsdp,heavy_tail,multinode", {"layers": 2})
    simulate([8, 16], out, pattern="hsdp,heavy_tail,multinode", seed=3, steps=6, params=params,
             compresslevel=1)  # fmt: skip
    return analyze_keeping_replay(out, [32])


def test_measured_waits_as_waits_give_back_the_measured_steps(hsdp: tuple) -> None:
    """Each collective's measured wait moved out of its duration into the wait before it: the
    same steps, to the nanosecond, as the measured durations replay."""
    _, study = hsdp
    base = study.base
    g, c = base.graph, base.coll
    nodes = c["node"].to_numpy()
    wait = c["wait"].to_numpy().astype(np.float64)
    assert wait.sum() > 0
    dur = g.dur / 1e9
    moved, pre = dur.copy(), np.zeros(len(g))
    moved[nodes] -= wait
    pre[nodes] = wait
    want = replay(g).step_time[base.kept]
    got = replay(g, moved, pre).step_time[base.kept]
    assert got == pytest.approx(want, abs=1e-9)


def test_only_a_collective_of_the_same_group_absorbs(hsdp: tuple) -> None:
    _, study = hsdp
    g = study.base.graph
    flags = absorbing(g)
    c = g.collectives
    pg = dict(zip(c["node"].tolist(), c["pg"].astype(str).tolist(), strict=True))
    assert len(set(pg.values())) >= 2  # the shard and the replicate groups
    order = g.order.tolist()
    last: dict[int, int] = {}
    seen = {True: 0, False: 0}
    for i in order:
        r = int(g.res[i])
        p = last.get(r, -1)
        last[r] = i
        if i not in pg or p < 0 or g.kind[p] != DCOLL:
            continue
        assert flags[i] == (pg[p] == pg[i]), (i, pg[p], pg[i])
        seen[bool(flags[i])] += 1
    assert seen[True] and seen[False]  # both cases occur in an HSDP step


def test_first_allgather_waits_for_its_node_and_the_allreduce_for_the_rest(hsdp: tuple) -> None:
    """At 16 ranks on two nodes: the in-node AllGather draws the slowest of its 8 ranks; the
    replicate AllReduces carry the slowest of 16 less that, on top of the step's lateness."""
    _, study = hsdp
    n = 16
    study.split_durations(n)
    hs, ds = study._work_scales(n)
    power = study.delays.work_power if study.delays is not None else 1.0
    hs = hs**power
    first = study._memo[first_key(hs, ds)]
    assert first == 0
    eight = study._wait_terms(0, 8, 8, hs, ds)
    assert study._wait_terms(0, n, 8, hs, ds) == eight
    sixteen = study._wait_terms(0, n, n, hs, ds)
    assert sixteen[1] > eight[1]
    c = study.base.coll
    anchor, late = study._memo[("late", n, False, False, 0, 0)]
    kind = c["collective"].astype(str).to_numpy()
    joins = c["joins"].to_numpy()
    nodes = c["node"].to_numpy()
    position = c["position"].to_numpy()
    assert set(joins[kind == "allreduce"].tolist()) == {1.0}
    assert set(joins[kind == "allgather"].tolist()) == {1.0 / 8}
    step = study.base.graph.step
    firsts = {int(step[v]): float(late[v]) for v in nodes[position == 0]}
    replicate = nodes[(kind == "allreduce") & (position > 0)]
    assert len(replicate)
    for v in replicate.tolist():
        want = firsts[int(step[v])] + (sixteen[1] - eight[1])
        assert late[v] == pytest.approx(want, abs=1e-12)
        assert anchor[v] >= 0
    assert math.isfinite(float(study.step_time(32)))
