"""In a GPU trace, main-thread time inside no traced op is idle, in the replay as in classify:
a "host" what-if or lever frees host work, not untraced time. On a torch.compile trace (HTA's
triton example) 354 ms of a 355 ms step are untraced; the host lever claimed 1,876x for 1.4 ms
of host work."""

from __future__ import annotations

from pathlib import Path

import pytest
from minitrace import MiniTrace

from tracescale.api import analyze
from tracescale.categories import CATEGORIES
from tracescale.classify.rank import classify_rank
from tracescale.classify.rules import load_rules
from tracescale.ingest.decode import load_trace
from tracescale.ingest.steps import find_steps
from tracescale.replay.graph.build import GAP, build_graph

STEP_US = 10_000.0


def _trace(path: Path) -> Path:
    """Per step: a 1 ms op launching a 2 ms kernel, then 6 ms with nothing traced, then a
    1 ms op launching a 0.5 ms kernel."""
    t = MiniTrace()
    for s in range(3):
        o = s * STEP_US
        t.step(s, o, STEP_US).host("aten::mm", o, 1000).kernel("gemm", o + 100, 2000)
        t.host("aten::add", o + 9000, 1000).kernel("add", o + 9100, 500)
    return t.write(path / "rank0.json")


def test_untraced_gaps_are_idle_nodes_and_classify_agrees(tmp_path: Path) -> None:
    trace = load_trace(str(_trace(tmp_path)))
    rules = load_rules()
    result = classify_rank(trace, rules)
    graph = build_graph(trace, find_steps(trace), result.collectives, rules)
    idle = CATEGORIES.index("idle")
    gaps = (graph.kind == GAP) & (graph.category == idle) & (graph.step >= 0)
    # the gap between the two ops, 1 ms to 9 ms; classify's idle is its part where the GPU
    # idles too, 2.1 ms to 9 ms
    assert graph.dur[gaps].sum() / 3 / 1e9 == pytest.approx(0.008, abs=1e-9)
    assert result.steps["idle"].mean() == pytest.approx(0.0069, abs=1e-9)
    host = (graph.kind == GAP) & (graph.category == CATEGORIES.index("host")) & (graph.step >= 0)
    assert graph.dur[host].sum() / 3 / 1e9 == pytest.approx(0.002, abs=1e-9)  # inside the ops


def test_the_host_lever_does_not_free_untraced_time(tmp_path: Path) -> None:
    _trace(tmp_path / "ws1")
    study = analyze(tmp_path, jobs=1, no_cache=True).studies[0]
    host = study["scaling"]["replay"]["levers"]["points"][0]["levers"].get("host")
    # 2 ms of host ops outside kernels at most: removing them cannot beat 10/8
    assert host is None or host["speedup"] <= 10 / 8 + 1e-9
    parts = study["scaling"]["serial_fraction"]["by_category"]
    assert parts["idle"] > parts["host"]


def test_the_torch_compile_trace_keeps_its_untraced_time(shared_traces: Path) -> None:
    study = analyze(shared_traces / "hta" / "triton_example", jobs=1, no_cache=True).studies[0]
    for point in study["scaling"]["replay"]["levers"]["points"]:
        assert point["levers"].get("host", {"speedup": 1.0})["speedup"] < 1.01
    parts = study["scaling"]["serial_fraction"]["by_category"]
    assert parts["idle"] == pytest.approx(
        study["runs"][0]["breakdown_s"]["idle"] / 0.3555, abs=0.01
    )


def test_a_cpu_trace_keeps_its_ops_as_compute(shared_traces: Path) -> None:
    """A CPU-only trace: its ops' time is compute, its untraced time host. Removing host time
    (63% of the step) buys 1/(1 - 0.63), not the 11x it claimed when the ops went with it."""
    path = shared_traces / "hta" / "distributed_info_unavailable"
    study = analyze(path, jobs=1, no_cache=True).studies[0]
    run = study["runs"][0]
    share = run["breakdown_s"]["host"] / run["step_time_s"]["mean"]
    host = study["scaling"]["replay"]["levers"]["points"][0]["levers"]["host"]["speedup"]
    assert host == pytest.approx(1 / (1 - share), rel=0.01)
