"""The analyzer on simulate's pp, moe, zero2, hsdp and act_ckpt studies against their truth:
attribution at the measured N within 5% of the step per category, replay error on the
measured steps <= 1%; projected speedup error at 2x/4x/8x is printed, not asserted (a
projection's accuracy is the analyzer's, not the simulator's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tracescale.simulate import pattern_params, simulate

#: pattern -> (world sizes, --set overrides); projections to 2x, 4x, 8x the largest N
CASES: dict[str, tuple[list[int], dict[str, float]]] = {
    "pp": ([4, 8], {"layers": 2, "microbatches": 32}),
    "pp,act_ckpt,grad_accum": ([4, 8], {"layers": 1, "microbatches": 32, "accum_steps": 2}),
    "moe": ([1, 2, 4], {"layers": 2}),
    "zero2,grad_accum": ([1, 2, 4], {"layers": 2, "accum_steps": 2}),
    "hsdp": ([2, 4, 8], {"layers": 2, "gpus_per_node": 4}),
    "fsdp,act_ckpt": ([1, 2, 4], {"layers": 2}),
}


@pytest.fixture(scope="module", params=list(CASES))
def analyzed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    from tracescale.api import analyze

    pattern = str(request.param)
    sizes, sets = CASES[pattern]
    top = max(sizes)
    root: Path = tmp_path_factory.mktemp(pattern.replace(",", "+"))
    truth = simulate(sizes, root, pattern=pattern, steps=4 if "accum_steps" in sets else 3,
                     seed=7, params=pattern_params(pattern, sets),
                     truth_at=[2 * top, 4 * top, 8 * top], compresslevel=1)  # fmt: skip
    entry = analyze(root, jobs=1, no_cache=True, project=[2 * top, 4 * top, 8 * top])
    return pattern, truth, entry.studies[0]


def test_attribution_within_five_percent(
    analyzed: tuple[str, dict[str, Any], dict[str, Any]],
) -> None:
    pattern, truth, entry = analyzed
    for run in entry["runs"]:
        t = truth["runs"][str(run["world_size"])]
        assert run["step_time_s"]["mean"] == pytest.approx(t["step_time"], rel=0.01)
        for c, value in t["breakdown"].items():
            assert abs(run["breakdown_s"][c] - value) <= 0.05 * t["step_time"], (pattern, c)


def test_replay_error_at_most_one_percent(
    analyzed: tuple[str, dict[str, Any], dict[str, Any]],
) -> None:
    pattern, _, entry = analyzed
    for run in entry["runs"]:
        assert run["replay_error"] <= 0.01, (pattern, run["world_size"])


def test_projection_error_is_reported(
    analyzed: tuple[str, dict[str, Any], dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    pattern, truth, entry = analyzed
    base = str(min(truth["world_sizes"]))
    lines = []
    for proj in entry["scaling"]["projections"]:
        n = proj["world_size"]
        true = truth["speedup"][str(n)] / truth["speedup"][base]
        lo, hi = proj.get("speedup_ci90") or (float("nan"), float("nan"))
        lines.append(
            f"N={n} {proj['speedup'] / true - 1:+.1%} {'in' if lo <= true <= hi else 'out'}"
        )
    with capsys.disabled():
        print(f"\n{pattern}: projected speedup error " + ", ".join(lines))
    assert lines
