"""The launch-bound lever's CUDA-graph gain: the step replayed with its kernel launches
replaced by one graph launch per step, against the simulator's own schedule of the same job
run from a CUDA graph (``launch_bound`` against ``launch_bound,cuda_graph``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracescale.pipeline import analyze
from tracescale.simulate import pattern_params, simulate

SIZES = [1, 2, 4]
TARGETS = [8, 16, 32]
#: launches of 20 us against kernels that shrink below them; little else in the step
LAUNCH_BOUND = {
    "launch_overhead": 20e-6,
    "dl_parallel": 0.003,
    "sync_stall": 0.0005,
    "layers": 48,
    "graph_launch": 20e-6,
}


def _truth_steps(tmp: Path, pattern: str, sets: dict[str, float | int]) -> dict[str, float]:
    truth = simulate(
        SIZES, tmp, pattern=pattern, seed=0, truth_at=TARGETS,
        params=pattern_params(pattern, sets), compresslevel=1,
    )  # fmt: skip
    return {k: float(v) for k, v in truth["model"]["step_time"].items()}


@pytest.mark.parametrize(
    ("pattern", "sets"), [("launch_bound", LAUNCH_BOUND), ("ddp,comm_types", {"layers": 8})]
)
def test_replayed_graph_gain_matches_the_graphed_schedule(
    tmp_path: Path, pattern: str, sets: dict[str, float | int]
) -> None:
    eager = _truth_steps(tmp_path / "eager", pattern, sets)
    graphed = _truth_steps(tmp_path / "graph", pattern + ",cuda_graph", sets)
    entry = analyze(str(tmp_path / "eager"), jobs=1, no_cache=True, project=TARGETS).studies[0]
    points = entry["scaling"]["replay"]["cuda_graph"]["points"]
    assert [p["world_size"] for p in points] == [1, *TARGETS]
    for p in points:
        n = str(p["world_size"])
        true_gain = eager[n] / graphed[n]
        assert abs(p["speedup"] / true_gain - 1) <= 0.05, (pattern, n, p["speedup"], true_gain)
        assert p["graph_step_time_s"] == pytest.approx(p["step_time_s"] / p["speedup"])
    if pattern == "launch_bound":
        assert points[-1]["speedup"] > 1.15  # kernels shrank below the launch rate
        lever = [f for f in entry["findings"] if f["category"] == "host"]
        assert lever and "one CUDA graph launch per step" in lever[0]["text"]
        assert lever[0]["value"] == pytest.approx(points[-1]["speedup"])
    else:
        assert max(p["speedup"] for p in points) < 1.05  # nothing launch-bound to buy
