"""An asynchronous copy of pageable host memory blocks the host like a sync (``.cpu()`` of a
tensor not in pinned memory): its wait is sync, named by the op that issued it, and the sync
lever replays it made asynchronous (pinned memory, ``non_blocking=True``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from minitrace import MiniTrace

from tracescale.api import analyze
from tracescale.classify.blocking import blocking_copies
from tracescale.ingest.decode import load_trace


def _trace(path: Path, memory: str, blocks: bool | None = None) -> Path:
    """Per step: a 5 ms kernel, then `.cpu()` of its result: a DtoH copy of 0.1 ms into
    ``memory`` host memory, queued behind the kernel; with pageable memory the call returns
    when the copy is done (5.15 ms). Then 3 ms of host work launching a 1 ms kernel, which
    runs when the stream and its launch allow. Steps end with their last kernel."""
    blocking = memory == "Pageable" if blocks is None else blocks
    step_us = 9200.0 if blocking else 6200.0
    t = MiniTrace()
    for s in range(3):
        o = s * step_us
        t.step(s, o, step_us).host("aten::mm", o, 100).kernel("gemm", o + 50, 5000)
        call_us = 5040.0 if blocking else 10.0
        t.host("aten::copy_", o + 100, call_us + 20)
        t.events.append(
            {"ph": "X", "cat": "gpu_memcpy", "name": f"Memcpy DtoH (Device -> {memory})",
             "pid": 0, "tid": 7, "ts": o + 5050, "dur": 100,
             "args": {"device": 0, "stream": 7, "correlation": 9000 + s}}
        )  # fmt: skip
        t.events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 100, "tid": 1,
             "ts": o + 110, "dur": call_us, "args": {"correlation": 9000 + s}}
        )  # fmt: skip
        h = o + (5200 if blocking else 200)
        t.host("aten::add", h, 3000).kernel("add", max(h + 2900, o + 5150), 1000, launch=h + 2900)
    return t.write(path / "ws1" / "rank0.json")


def _study(path: Path) -> dict[str, Any]:
    study: dict[str, Any] = analyze(path, jobs=1, no_cache=True).studies[0]
    return study


def test_only_the_copy_of_pageable_memory_blocks(tmp_path: Path) -> None:
    pageable = load_trace(str(_trace(tmp_path / "a", "Pageable")))
    pinned = load_trace(str(_trace(tmp_path / "b", "Pinned")))
    returned_first = load_trace(str(_trace(tmp_path / "c", "Pageable", blocks=False)))
    assert blocking_copies(pageable).sum() == 3
    assert blocking_copies(pinned).sum() == 0
    assert blocking_copies(returned_first).sum() == 0  # staged, and the host went on


def test_the_wait_is_sync_named_by_its_op(tmp_path: Path) -> None:
    _trace(tmp_path, "Pageable")
    run = _study(tmp_path)["runs"][0]
    # after the copy returns (5.15 ms) the GPU idles until the next kernel (8.1 ms): sync
    assert run["breakdown_s"]["sync"] == pytest.approx(0.00295, abs=1e-9)
    assert run["top_ops"]["sync"][0]["name"] == "aten::copy_"


def test_the_sync_lever_replays_the_copy_made_asynchronous(tmp_path: Path) -> None:
    _trace(tmp_path / "pageable", "Pageable")
    _trace(tmp_path / "pinned", "Pinned")
    blocked, free = _study(tmp_path / "pageable"), _study(tmp_path / "pinned")
    gain = blocked["scaling"]["replay"]["levers"]["points"][0]["levers"]["sync"]["speedup"]
    want = blocked["runs"][0]["step_time_s"]["mean"] / free["runs"][0]["step_time_s"]["mean"]
    assert gain == pytest.approx(want, rel=0.02)
