"""One-time set-up inside the profiled steps is said first, and its category's levers are left
out: they would be about CUDA's lazy initialization, not training."""

from __future__ import annotations

from pathlib import Path

from minitrace import MiniTrace

from tracescale.api import analyze


def _trace(path: Path, setup_us: float) -> Path:
    t = MiniTrace()
    for s in range(2):
        o = s * 20_000.0
        t.step(s, o, 20_000).host("aten::mm", o, 1000).kernel("gemm", o + 100, 1000)
        if s == 0:
            t.runtime("cudaDeviceGetStreamPriorityRange", o + 2000, setup_us)
        t.host("aten::add", o + 19_000, 1000).kernel("add", o + 19_100, 500)
    return t.write(path / "ws1" / "rank0.json")


def test_a_set_up_call_that_fills_the_step_is_the_first_finding(tmp_path: Path) -> None:
    _trace(tmp_path, 16_000)
    findings = analyze(tmp_path, jobs=1, no_cache=True).studies[0]["findings"]
    assert findings[0]["kind"] == "setup"
    assert findings[0]["text"].startswith(
        "One-time set-up inside the profiled steps: `cudaDeviceGetStreamPriorityRange` takes "
        "8.0 ms per step (40%) at 1 GPU, CUDA's lazy initialization"
    )
    assert findings[0]["value"] == 0.4
    assert not [f for f in findings[1:] if f["category"] == findings[0]["category"]]


def test_a_short_set_up_call_changes_nothing(tmp_path: Path) -> None:
    _trace(tmp_path, 500)
    findings = analyze(tmp_path, jobs=1, no_cache=True).studies[0]["findings"]
    assert all(f["kind"] != "setup" for f in findings)


def _capture_trace(path: Path, capture: bool) -> Path:
    """One step of 20 ms: 15 ms of host work (Python compiling and capturing), a few kernels;
    with ``capture`` the step begins a stream capture, as vLLM's warm-up does."""
    t = MiniTrace().step(0, 0, 20_000).host("triton/runtime/jit.py(574): run", 100, 15_000)
    if capture:
        t.runtime("cudaStreamBeginCapture", 50, 5)
    t.host("aten::mm", 16_000, 1000).kernel("gemm", 16_100, 3000)
    return t.write(path / "ws1" / "rank0.json")


def test_graph_capture_inside_the_steps_is_said_first(tmp_path: Path) -> None:
    _capture_trace(tmp_path / "captured", capture=True)
    _capture_trace(tmp_path / "plain", capture=False)
    captured = analyze(tmp_path / "captured", jobs=1, no_cache=True).studies[0]
    first = captured["findings"][0]
    assert first["kind"] == "setup" and first["category"] == "host"
    assert first["text"].startswith("CUDA graph capture inside the profiled steps: host work")
    assert not [f for f in captured["findings"][1:] if f["category"] == "host"]
    assert any("CUDA graph capture inside the steps (1 stream capture begun)" in w
               for w in captured["warnings"])  # fmt: skip
    plain = analyze(tmp_path / "plain", jobs=1, no_cache=True).studies[0]
    assert all(f["kind"] != "setup" for f in plain["findings"])
