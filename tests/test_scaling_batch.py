"""The batched bootstrap aggregation equals aggregating each replicate on its own."""

from __future__ import annotations

import numpy as np

from tracescale.categories import CATEGORIES
from tracescale.classify.result import CAUSED
from tracescale.scaling.stats import VALUE_COLS, RunData, _median_rank, aggregate, aggregate_many


def _run(seed: int) -> RunData:
    rng = np.random.default_rng(seed)
    nr, ns, ng = 3, 5, 2
    mask = np.ones((nr, ns))
    mask[1, 3:] = 0.0  # rank 1 recorded fewer steps
    values = rng.uniform(0.0, 1.0, (nr, ns, len(VALUE_COLS))) * mask[:, :, None]
    csum = rng.uniform(0.0, 0.1, (nr, ns, ng)) * mask[:, :, None]
    ccnt = rng.integers(1, 3, (nr, ns, ng)).astype(np.float64) * mask[:, :, None]
    keys = (("allreduce", 1000, 4), ("broadcast", 64, 4))
    return RunData(4, (0, 1, 2), values, mask, keys, csum, ccnt)


def test_aggregate_many_equals_one_by_one() -> None:
    d = _run(3)
    rw = np.array([[1.0, 1.0, 1.0], [0.0, 3.0, 0.0], [2.0, 0.0, 1.0], [0.0, 0.0, 3.0]])
    sw = np.array(
        [[1.0] * 5, [0.0, 0.0, 0.0, 5.0, 0.0], [2.0, 0.0, 1.0, 1.0, 1.0], [0.0] * 4 + [5.0]]
    )
    # Row 1: rank 1 has no resampled step, so the degenerate fall-back to all ranks applies.
    batch = aggregate_many(d, rw, sw, {"compute": 0.5, "communication": 2.0})
    for b, got in enumerate(batch):
        want = aggregate(d, rw[b], sw[b], {"compute": 0.5, "communication": 2.0})
        for c in CATEGORIES:
            assert np.isclose(got.cats[c], want.cats[c], rtol=1e-12, atol=0.0)
        assert np.isclose(got.total, want.total, rtol=1e-12)
        assert np.allclose(got.coll_transfer, want.coll_transfer, rtol=1e-12)
        assert np.allclose(got.coll_weight, want.coll_weight, rtol=1e-12)
        assert np.allclose(got.coll_per_step, want.coll_per_step, rtol=1e-12)
        for c in CAUSED:
            assert np.isclose(got.own_median[c], want.own_median[c], rtol=1e-12)
    assert batch[1].cats["compute"] != batch[0].cats["compute"]


def test_weighted_median_matches_median_of_repeated_pool() -> None:
    rng = np.random.default_rng(0)
    for trial in range(300):
        r = int(rng.integers(1, 8))
        values = rng.normal(size=(4, r))
        if trial % 3 == 0:
            values = np.round(values)  # ties
        weights = rng.multinomial(r, np.full(r, 1.0 / r), size=4).astype(np.float64)
        weights[3] = 0.0  # empty pool: every rank with weight > 0 counts once; none here
        got = _median_rank(values, weights)
        for b in range(4):
            counts = np.rint(weights[b]).astype(np.int64)
            if counts.sum() <= 0:
                counts = (weights[b] > 0).astype(np.int64)
            pool = np.repeat(values[b], counts)
            want = float(np.median(pool)) if pool.size else 0.0
            assert got[b] == want


def test_step_schedule_takes_most_common_key_and_mean_hideable_per_position() -> None:
    import pandas as pd

    from tracescale.scaling.stats import step_schedule

    rows = []
    for rank in (0, 1):
        for step in (1, 2):
            # Position 0: allreduce 100 B on three of four steps, broadcast on one.
            first = ("broadcast", 8) if (rank, step) == (1, 2) else ("allreduce", 100)
            rows.append((rank, step, *first, 4, 10, 0.004 + 0.001 * rank, True))
            # Position 1: a tie between two keys: the one first in sorted key order wins.
            second = ("allgather", 50) if step == 1 else ("allreduce", 50)
            rows.append((rank, step, *second, 4, 20, float("nan") if rank else 0.002, True))
    rows.append((0, 3, "allreduce", 100, 4, 10, 9.0, True))  # a cut step: one instance only
    rows.append((2, 1, "allreduce", 100, 4, 10, 9.0, True))
    cols = ["rank", "step", "collective", "bytes", "group_size", "start", "hideable", "async"]
    got = step_schedule(pd.DataFrame(rows, columns=cols))
    assert got == (
        ("allreduce", 100, 4, True, (0.004 + 0.004 + 0.005 + 0.005) / 4),
        ("allgather", 50, 4, True, (0.002 + 0.0 + 0.002 + 0.0) / 4),
    )
