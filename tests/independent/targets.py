"""The issue's targets for a projected study against its truth, shared by the test modules."""

from __future__ import annotations

from typing import Any


def assert_meets_targets(
    entry: dict[str, Any], truth: dict[str, Any], targets: tuple[int, ...]
) -> None:
    """replay_error <= 2% on every run; at 2x, 4x and 8x the largest measured N (``targets``)
    the projected speedup within 10%, 10% and 15% of the truth, the truth inside the 90%
    interval."""
    for run in entry["runs"]:
        assert run["replay_error"] <= 0.02, (run["world_size"], run["replay_error"])
    got = {proj["world_size"]: proj for proj in entry["scaling"]["projections"]}
    for k, n in zip((2, 4, 8), targets, strict=True):
        true = truth["speedup"][str(n)]
        proj = got[n]
        lo, hi = proj["speedup_ci90"]
        error = proj["speedup"] / true - 1
        assert abs(error) <= (0.10 if k <= 4 else 0.15), (n, proj["speedup"], true)
        assert lo <= true <= hi, (n, lo, true, hi)
