"""The slowest rank of each group, and of the groups a later collective joins.

A late rank holds only its own group at the step's first collective (HSDP's in-node
AllGather waits for the slowest of its node); the replicate AllReduce across nodes then waits
for the slowest of the nodes it joins. Reading the AllReduce's arrival offsets as device
jitter counted the other node's lateness a second time: the part of an offset explained by
the members' different releases from the first collective is taken out of the jitter, and
carried instead as the lateness of the joined groups' slowest rank (on a simulated HSDP
study: ``test_collective_wait_absorption``).
"""

from __future__ import annotations

import numpy as np

from tracescale.groups import group_codes
from tracescale.replay.arrivals.joined import first_of_step, joined_share, released_apart
from tracescale.replay.arrivals.slowest_rank import _steps_apart
from tracescale.table import Table


def _two_nodes() -> tuple[Table, np.ndarray, int, np.ndarray]:
    """Four ranks, two per node, one step: an in-node AllGather (position 0) that node B
    leaves 4 s after node A, then a replicate AllReduce (position 1) pairing ranks 0/2 and
    1/3, each rank arriving 1 s (ranks 0, 2) or 1.5 s (ranks 1, 3) after its AllGather."""
    c = Table(
        {
            "rank": np.array([0, 1, 2, 3, 0, 2, 1, 3]),
            "step": np.zeros(8, dtype=np.int64),
            "position": np.array([0, 0, 0, 0, 1, 1, 1, 1]),
            "pg": np.array(["sA", "sA", "sB", "sB", "r0", "r0", "r1", "r1"], dtype=object),
            "collective": np.array(["allgather"] * 4 + ["allreduce"] * 4, dtype=object),
            "seq": np.zeros(8, dtype=np.int64),
        }
    )
    instance, uniq = group_codes(c.col("pg"), c.col("collective"), c.col("seq"))
    end = np.array([10.0, 10.0, 14.0, 14.0, 20.0, 20.0, 21.0, 21.0])
    return c, instance, len(uniq[0]), end


def test_released_apart_is_each_members_first_collective_end_less_its_groups_mean() -> None:
    c, instance, count, end = _two_nodes()
    got = released_apart(first_of_step(c), instance, count, end)
    # in-node: both members left together; replicate: node A's left 2 s before the mean
    assert got.tolist() == [0.0, 0.0, 0.0, 0.0, -2.0, 2.0, -2.0, 2.0]


def test_joined_share_counts_the_first_collectives_each_group_spans() -> None:
    c, instance, count, _ = _two_nodes()
    got = joined_share(first_of_step(c), instance, count)
    assert got.tolist() == [0.5, 0.5, 0.5, 0.5, 1.0, 1.0, 1.0, 1.0]


def test_steps_apart_is_the_gap_since_the_groups_last_meeting() -> None:
    """The in-node group meets every step, the replicate group every fourth (gradient
    accumulation); the replicate group's first meeting takes its typical gap."""
    step = np.array([0, 1, 2, 3, 3, 4, 5, 6, 7, 7])
    pgs = ["s", "s", "s", "s", "r", "s", "s", "s", "s", "r"]
    got = _steps_apart(step, pgs, np.arange(10))
    assert got.tolist() == [1.0, 1.0, 1.0, 1.0, 4.0, 1.0, 1.0, 1.0, 1.0, 4.0]
