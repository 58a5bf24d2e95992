"""Blocking copies are sync stalls named by the op that issued them, and each finding names
the lever that fits its evidence (CUDA graphs for launch-bound host time, pinned memory and
non_blocking for a blocking copy)."""

from __future__ import annotations

from typing import Any

import pytest

import tracescale
from tracescale.findings import top_findings


def X(name, ts, dur, *, cat="cpu_op", pid=1, tid=1, **args):
    ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    return {**ev, "args": args} if args else ev


def blocking_copy_trace() -> list[dict]:
    """Per 70 ms step: a 10 ms kernel, then `.item()` whose hipMemcpyWithStream blocks 50 ms
    while the GPU is idle (the copy waits for the stream), then the next op launches."""
    ev = []
    for k in range(3):
        t, c = 70_000 * k, 10 * k
        ev.append(X(f"ProfilerStep#{k}", t, 69_000, cat="user_annotation"))
        ev.append(X("aten::mm", t + 100, 300))
        ev.append(X("hipLaunchKernel", t + 150, 100, cat="cuda_runtime", correlation=c))
        ev.append(X("gemm", t + 400, 10_000, cat="kernel", pid=0, tid=7, device=0, stream=7,
                    correlation=c))  # fmt: skip
        ev.append(X("aten::item", t + 1_000, 60_000))
        ev.append(X("aten::_local_scalar_dense", t + 1_010, 59_980))
        ev.append(X("hipMemcpyWithStream", t + 1_020, 59_000, cat="cuda_runtime",
                    correlation=c + 1))  # fmt: skip
        ev.append(X("Memcpy DtoH (Device -> Host)", t + 59_900, 5, cat="gpu_memcpy", pid=0,
                    tid=7, device=0, stream=7, correlation=c + 1))  # fmt: skip
        ev.append(X("aten::add", t + 61_100, 300))
        ev.append(X("hipLaunchKernel", t + 61_150, 100, cat="cuda_runtime", correlation=c + 2))
        ev.append(X("add_kernel", t + 61_300, 2_000, cat="kernel", pid=0, tid=7, device=0,
                    stream=7, correlation=c + 2))  # fmt: skip
    return ev


def test_a_blocking_copy_is_a_sync_stall_named_by_its_op(write_trace, tmp_path):
    path = write_trace(blocking_copy_trace(), "amd.json", folder=tmp_path / "in")
    study = tracescale.analyze(str(path), jobs=1, no_cache=True)
    (s,) = study.to_dict()["studies"]
    run = s["runs"][0]
    step = run["step_time_s"]["mean"]
    assert run["breakdown_s"]["sync"] == pytest.approx(0.050, abs=0.002)
    assert run["breakdown_s"]["host"] < 0.1 * step
    names = [e["name"] for e in run["top_ops"]["sync"]]
    assert names[0] == "aten::_local_scalar_dense", names
    assert not any("Launch" in n or n == "aten::add" for n in names)
    sync = [f for f in s["findings"] if f["category"] == "sync"]
    assert sync and "pinned memory" in sync[0]["text"] and "non_blocking=True" in sync[0]["text"]
    assert ".item()" in sync[0]["text"]


def _study(cat: str, share_of_step: float, ops: list[tuple[str, float]]) -> dict[str, Any]:
    step = 0.1
    other = "compute" if cat != "compute" else "host"
    breakdown = {cat: share_of_step * step, other: (1 - share_of_step) * step}
    top = [
        {"name": n, "share": sh, "seconds": sh * breakdown[cat], "category_s": breakdown[cat]}
        for n, sh in ops
    ]
    run = {
        "world_size": 1,
        "step_time_s": {"mean": step},
        "breakdown_s": breakdown,
        "top_ops": {cat: top},
    }
    return {"runs": [run], "mode": "strong", "scaling": {"assumed": True}}


@pytest.mark.parametrize(
    ("cat", "ops", "lever"),
    [
        ("host", [("cudaLaunchKernel", 0.7)], 'torch.compile(mode="reduce-overhead")'),
        ("host", [("hipLaunchKernel", 0.7)], "CUDA graphs"),
        ("sync", [("aten::item", 0.8)], "non_blocking=True"),
        ("sync", [("aten::copy_", 0.6)], "pinned memory"),
        ("sync", [("cudaDeviceSynchronize", 0.9)], "no blocking host-device synchronization"),
        (
            "dataloader",
            [("enumerate(DataLoader)#_MultiProcessingDataLoaderIter", 0.9)],
            "DataLoader workers",
        ),
        ("memcpy", [("Memcpy HtoD (Pageable -> Device)", 0.9)], "non_blocking copies"),
        ("host", [("aten::add", 0.9)], "fewer, larger or fused ops"),
    ],
)
def test_each_cause_names_its_lever(cat: str, ops: list[tuple[str, float]], lever: str) -> None:
    found = [f for f in top_findings(_study(cat, 0.5, ops)) if f["category"] == cat]
    assert found, top_findings(_study(cat, 0.5, ops))
    assert lever in found[0]["text"], found[0]["text"]
    if lever == "no blocking host-device synchronization":
        assert "pinned memory" not in found[0]["text"]
