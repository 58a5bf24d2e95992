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
