"""Real traces whose first finding misled, pinned: one-time CUDA set-up inside the step, a
blocking copy read as host overhead, a CUDA-graph lever for a run with no device work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracescale.api import analyze


def _study(path: Path) -> dict[str, Any]:
    study: dict[str, Any] = analyze(path, jobs=1, no_cache=True).studies[0]
    return study


def test_cuda_set_up_inside_the_step_is_said_first(shared_traces: Path) -> None:
    study = _study(shared_traces / "hta" / "execution_trace")
    first = study["findings"][0]
    assert first["kind"] == "setup" and "`cudaDeviceGetStreamPriorityRange`" in first["text"]
    assert not [f for f in study["findings"] if "fewer, larger or fused ops" in f["text"]]


def test_a_blocking_copy_is_sync_under_the_op_that_issued_it(shared_traces: Path) -> None:
    study = _study(shared_traces / "hta" / "negative_queue_length_values_check")
    run = study["runs"][0]
    first = study["findings"][0]  # no gain promised: what the device waits for is elsewhere
    assert first["category"] == "sync" and "blocking copies" in first["text"]
    assert "non_blocking=True" in first["text"] and "faster" not in first["text"]
    assert run["breakdown_s"]["sync"] > 2 * run["breakdown_s"]["host"]
    assert run["top_ops"]["sync"][0]["name"] == "aten::copy_"
    # what stays host is the other copies' launch time (it was 87 ms, 71% of host, with the
    # blocking waits in it)
    copies = [e["seconds"] for e in run["top_ops"]["host"] if e["name"] == "cudaMemcpyAsync"]
    assert sum(copies) < 0.005


def test_no_cuda_graph_lever_without_device_work(shared_traces: Path) -> None:
    study = _study(shared_traces / "hta" / "cupti_profiler")
    assert study["runs"][0]["kind"] == "cpu"
    assert study["scaling"]["replay"]["cuda_graph"]["points"] == []
    assert not [f for f in study["findings"] if "CUDA graph" in f["text"]]
