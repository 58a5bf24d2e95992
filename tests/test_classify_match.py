"""Cross-rank matching of collectives: clock offsets from instance ends, transfer and wait."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pandas as pd

from tracescale.classify.run import _match


def _rank(rank: int, skew_ns: int, starts: list[int], ends: list[int]) -> Any:
    rows = [
        {
            "rank": rank,
            "pg": "0",
            "collective": "allreduce",
            "seq": seq,
            "start_ns": s + skew_ns,
            "end_ns": e + skew_ns,
        }
        for seq, (s, e) in enumerate(zip(starts, ends, strict=True))
    ]
    return SimpleNamespace(collectives=pd.DataFrame(rows))


def test_skewed_rank_is_aligned_on_median_end_difference() -> None:
    ends = [2_000_000, 5_000_000, 9_000_000]
    ranks = [
        _rank(0, 0, [1_000_000, 4_000_000, 8_000_000], ends),
        # One instance ends 50 us off the others: the median ignores it.
        _rank(1, 3_000_000, [1_500_000, 4_200_000, 8_100_000], [2_000_000, 5_050_000, 9_000_000]),
        _rank(2, 100_000, [1_200_000, 4_100_000, 8_500_000], ends),  # within the threshold
    ]
    coll, offsets, _, warnings = _match(ranks)
    assert offsets == {0: 0, 1: 3_000_000, 2: 0}
    assert any("rank clocks differ" in w for w in warnings)
    first = coll[coll["seq"] == 0].set_index("rank")
    # The last rank to arrive (on aligned clocks) is rank 1, at 1.5 ms; transfer is the
    # shortest duration (rank 1's 0.5 ms), the rest of each rank's time is wait.
    assert first["late_rank"].tolist() == [1, 1, 1]
    assert first["transfer"].tolist() == [0.0005] * 3
    assert first["wait"].round(9).tolist() == [0.0005, 0.0, 0.0003]


def test_unskewed_ranks_keep_their_clocks_and_rank_without_matches_gets_zero() -> None:
    ends = [2_000_000, 5_000_000]
    ranks = [_rank(0, 0, [1_000_000, 4_000_000], ends), _rank(1, 0, [1_100_000, 4_000_000], ends)]
    lone = _rank(2, 7_000_000, [1_000_000], [2_000_000])
    lone.collectives["pg"] = "other"  # nothing to match against rank 0
    coll, offsets, _, warnings = _match([*ranks, lone])
    assert offsets == {0: 0, 1: 0, 2: 0}
    assert not any("rank clocks differ" in w for w in warnings)
    alone = coll[coll["rank"] == 2]
    assert alone["transfer"].tolist() == [0.001] and alone["wait"].tolist() == [0.0]
