"""Clock offsets between ranks that share no collective: reached through the groups between
them (tensor-parallel pairs and data parallel across them), exact."""

from __future__ import annotations

import pandas as pd
import pytest

from tracescale.classify.clocks import clock_offsets


def _instances(skew: dict[int, int]) -> pd.DataFrame:
    """Pairs {0,1}, {2,3} and data parallel {0,2}, {1,3}, three instances each; every
    instance ends at one true time, read on each member's clock."""
    rows = []
    groups = {"1:0,1": (0, 1), "1:2,3": (2, 3), "2:0,2": (0, 2), "2:1,3": (1, 3)}
    for k, (pg, members) in enumerate(groups.items()):
        for seq in range(3):
            true_end = 1_700_000_000_000_000_000 + 10_000 * (3 * k + seq)
            for r in members:
                rows.append({"rank": r, "pg": pg, "collective": "allreduce", "seq": seq,
                             "end_ns": true_end + skew[r]})  # fmt: skip
    return pd.DataFrame(rows)


def test_ranks_sharing_nothing_with_the_reference_are_chained() -> None:
    skew = {0: 0, 1: 300_000, 2: -500_000, 3: 1_000_000}
    got = clock_offsets(_instances(skew), ["pg", "collective", "seq"], 0, "end_ns")
    # rank 3 shares no instance with rank 0: through rank 1 (data parallel) or 2 (its pair)
    assert got == {0: 0.0, 1: 300_000.0, 2: -500_000.0, 3: 1_000_000.0}
    got = clock_offsets(_instances(skew), ["pg", "collective", "seq"], 3, "end_ns")
    assert got == {r: float(v - skew[3]) for r, v in skew.items()}


def test_a_rank_no_chain_reaches_is_left_out() -> None:
    c = _instances({0: 0, 1: 5, 2: 7, 3: 9})
    c = c[c["pg"].str.startswith("1:")]  # the pairs alone: two islands
    got = clock_offsets(c, ["pg", "collective", "seq"], 0, "end_ns")
    assert got == {0: 0.0, 1: 5.0}
    assert pytest.approx(7.0 - 9.0) == clock_offsets(c, ["pg", "collective", "seq"], 3, "end_ns")[2]
