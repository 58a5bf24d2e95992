"""The replay's processing order: measured order wherever edges allow, every edge forward.

Rounded timestamps (HTA's whole microseconds) tie a zero-length kernel's end with the start of
the sync waiting for it; the sort then put the sync first. Exact orders on tiny graphs."""

from __future__ import annotations

import numpy as np

from tracescale.replay.waits.order import backward_edges, forward_order


def _a(*v: int) -> np.ndarray:
    return np.asarray(v, dtype=np.int64)


def test_an_order_with_every_edge_forward_is_kept() -> None:
    order = _a(0, 1, 2, 3)
    res, dep, dep2 = _a(0, 0, 1, 0), _a(-1, -1, 1, -1), _a(-1, -1, -1, 2)
    assert backward_edges(order, dep, dep2) == 0
    assert forward_order(order, res, dep, dep2).tolist() == [0, 1, 2, 3]


def test_a_sync_sorted_before_the_kernel_it_waits_for_moves_after_it() -> None:
    # host thread (res 0): gap 0, launch 1, sync 2, gap 3; device (res 1): kernel 4 launched by 1
    res = _a(0, 0, 0, 0, 1)
    dep = _a(-1, -1, -1, -1, 1)
    dep2 = _a(-1, -1, 4, -1, -1)  # the sync waits for the kernel
    order = _a(0, 1, 2, 4, 3)  # the kernel's end tied with the sync's key: the sync came first
    assert backward_edges(order, dep, dep2) == 1
    fixed = forward_order(order, res, dep, dep2)
    assert fixed.tolist() == [0, 1, 4, 2, 3]
    assert backward_edges(fixed, dep, dep2) == 0


def test_a_cycle_leaves_its_nodes_in_measured_order_after_the_rest() -> None:
    res = _a(0, 0, 1)
    dep = _a(1, -1, -1)  # node 0 depends on node 1, which follows it on the same resource
    order = _a(0, 1, 2)
    assert forward_order(order, res, dep).tolist() == [2, 0, 1]
