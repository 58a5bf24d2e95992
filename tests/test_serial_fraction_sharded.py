"""Each category's serial fraction on the simulator's sharded, expert and checkpointed
patterns against its truth (two points of T(1)), and the truth's total the sum of its parts.

ZeRO-2 runs the optimizer on a 1/N shard: parallel work, divided away at infinite N (the
truth had kept the whole optimizer of the one-rank step: 6.8% against parts summing to 4.1%).
HSDP shards it over one node only: it stays at the node's share at any N.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tracescale.api import analyze
from tracescale.categories import CATEGORIES
from tracescale.simulate import pattern_params, simulate

#: name -> (pattern, parameter overrides, world sizes)
CASES = {
    "zero2": ("zero2", {"layers": 2}, [1, 2, 4]),
    "hsdp": ("hsdp", {"layers": 2, "gpus_per_node": 4}, [2, 4, 8]),
    "moe": ("moe", {"layers": 2}, [1, 2, 4]),
    "ddp_act_ckpt": ("ddp,act_ckpt", {"layers": 2}, [1, 2, 4]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_parts_within_two_points_and_the_truth_adds_up(tmp_path: Path, name: str) -> None:
    pattern, over, sizes = CASES[name]
    truth = simulate(
        sizes,
        tmp_path,
        pattern=pattern,
        params=pattern_params(pattern, over),
        steps=3,
        compresslevel=1,
    )
    want = truth["serial_by_category"]
    assert sum(want.values()) == pytest.approx(truth["serial_fraction"], abs=0.005)
    sf = analyze(tmp_path, jobs=1, no_cache=True).studies[0]["scaling"]["serial_fraction"]
    got = {c: float(sf["by_category"].get(c, 0.0)) for c in CATEGORIES}
    worst = max(CATEGORIES, key=lambda c: abs(got[c] - want.get(c, 0.0)))
    assert abs(got[worst] - want.get(worst, 0.0)) <= 0.02, (worst, got, want)
    assert sf["total"] == pytest.approx(truth["serial_fraction"], abs=0.02)
