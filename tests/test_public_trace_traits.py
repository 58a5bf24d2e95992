"""Traits of public Kineto traces written by others (TraceLens's test traces: BERT, Falconsai
and a B200 vLLM prefill served eagerly on H100/MI300/B200, an SGLang decode step that waits
in a blocking copy), each reproduced by a small hand-written trace so that no test reads or
downloads the originals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tracescale
from tests.minitrace import MiniTrace
from tracescale.findings.graph_lever import HOST_BOUND_SHARE


def _study(path: Path) -> dict[str, Any]:
    (s,) = tracescale.analyze(str(path), jobs=1, no_cache=True).to_dict()["studies"]
    return s


def eager_dispatch_trace() -> MiniTrace:
    """Per 10 ms step, 40 back-to-back ``aten::addmm`` of 235 us on the host, each launching a
    15 us kernel: the host owns ~90% of the step in op time (not in launch calls), the GPU
    is starved. An eagerly served small model looks like this (BERT-small, 81% host)."""
    t = MiniTrace()
    for k in range(3):
        s = 10_000 * k
        t.step(k, s, 10_000)
        for i in range(40):
            a = s + 50 + 240 * i
            t.host("aten::addmm", a, 235)
            t.kernel("gemm_small", a + 55, 15, launch=a + 50)
    return t


def test_eager_dispatch_bound_step_is_said_as_host_bound(tmp_path: Path) -> None:
    """The first finding is the CUDA-graph lever and says the device waits for the host's
    dispatch now, with the host's share and its ops; it never claims the launches hide under
    device work when the breakdown shows the GPU starved."""
    s = _study(eager_dispatch_trace().write(tmp_path / "eager.json"))
    (run,) = s["runs"]
    share = run["breakdown_s"]["host"] / run["step_time_s"]["mean"]
    assert share >= HOST_BOUND_SHARE
    first = s["findings"][0]
    assert first["category"] == "host" and first["kind"] == "lever"
    text = first["text"]
    assert text.startswith("Host overhead takes ") and f"({share:.0%})" in text
    assert "`aten::addmm`" in text and "waits while the host dispatches" in text
    assert "CUDA graphs or torch.compile" in text
    assert "hide under device work" not in text
    assert first["value"] > 1.03


def test_graph_lever_where_launches_hide_keeps_its_wording() -> None:
    """A step whose host time is small at the measured N keeps the "launches still hide"
    wording: the gain appears only as kernels shrink at a larger N."""
    from tracescale.findings.common import Target
    from tracescale.findings.graph_lever import graph_lever

    study = {"scaling": {"replay": {"cuda_graph": {"points": [{"world_size": 8, "speedup": 1.2}]}}}}
    last = {"step_time_s": {"mean": 0.01}, "breakdown_s": {"compute": 0.009, "host": 0.0005}}
    ((gain, f),) = graph_lever(study, Target(8, 0.01, {}, True), last, "1 GPU")
    assert gain == pytest.approx(1.2)
    assert f["text"].startswith("Kernel launches: ") and "still hide under device work" in f["text"]


def copy_wait_trace() -> MiniTrace:
    """One serving step (``step[DECODE bs=32]``, no ProfilerStep) whose host blocks 95 ms in a
    device-to-host copy while the GPU runs nothing this trace shows (SGLang's decode waiting
    on the previous batch's stream: 98% of its step in ``aten::copy_``)."""
    t = MiniTrace()
    t.annotation("step[DECODE bs=32]", 0, 100_000)
    t.kernel("arange_kernel", 60, 5, launch=50)
    t.host("aten::copy_", 200, 95_000)
    t._device(
        "Memcpy DtoH (Device -> Host)", "gpu_memcpy", 95_000, 5, 210, 7, {"bytes": 256},
        launch_dur=94_980, launch_name="cudaMemcpyWithStream",
    )  # fmt: skip
    for i in range(20):
        t.kernel("decode_kernel", 95_100 + 200 * i, 150, launch=95_050 + 200 * i)
    return t


def test_blocking_copy_wait_leads_over_the_assumed_optimum(tmp_path: Path) -> None:
    """A copy wait holding most of the step is the first thing said, before the one-run
    "step time would be lowest at 1 GPU" context (which says nothing about this step)."""
    s = _study(copy_wait_trace().write(tmp_path / "copy_wait.json"))
    kinds = [(f["kind"], f["category"]) for f in s["findings"]]
    assert kinds[0] == ("context", "sync"), kinds
    first = s["findings"][0]["text"]
    assert first.startswith("Synchronization takes ") and "`aten::copy_`" in first
    assert "non_blocking=True" in first
    optimum = [i for i, f in enumerate(s["findings"]) if "lowest at" in f["text"]]
    assert not optimum or optimum[0] > 0


def queued_late_trace() -> MiniTrace:
    """Per 20 ms step: a 2 us event sync, then the host queues a copy and a kernel at once
    (0.5-2 ms) that the device starts only at 8 ms (busy with work queued before the trace):
    vLLM's full-graph decode on ROCm, whose 2 us ``hipEventSynchronize`` was credited with
    8.3 ms of synchronization (44% of the step)."""
    t = MiniTrace()
    for k in range(3):
        s = 20_000 * k
        t.step(k, s, 20_000)
        t.runtime("cudaEventSynchronize", s + 40, 2)
        t.host("aten::index", s + 500, 1_500)
        t.memcpy(s + 8_000, 10, launch=s + 520)
        t.kernel("decode_graph_node", s + 8_100, 10_000, launch=s + 600)
    return t


def test_device_idle_with_work_queued_is_not_the_sync(tmp_path: Path) -> None:
    """The device waits for the host after a sync only until the host queues work again:
    the idle that follows with work already queued is not synchronization."""
    s = _study(queued_late_trace().write(tmp_path / "queued.json"))
    (run,) = s["runs"]
    bd, step = run["breakdown_s"], run["step_time_s"]["mean"]
    assert bd["sync"] < 0.001  # the 0.5 ms from the sync to the first launch, not 8 ms
    assert bd["idle"] + bd["host"] == pytest.approx(
        step - bd["compute"] - bd["memcpy"] - bd["sync"]
    )
    assert bd["idle"] > 0.005  # the device waits for what the trace does not show
    assert not any(f["category"] == "sync" for f in s["findings"])


def test_vllm_execute_context_annotations_are_the_steps(tmp_path: Path) -> None:
    """``execute_{tokens}_context_{n}(...)_generation_{m}(...)`` names differ per step by their
    token counts; they are one step marker, not as many one-off annotations."""
    t = MiniTrace()
    names = [
        "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086sqsq32sqsk55086)",
        "execute_8192_context_9(sq8155sk8430)_generation_37(sq37sk3)",
        "execute_context_1(888_788544)_generation_0(0)",
    ]
    for k, name in enumerate(names):
        s = 10_000 * k
        t.annotation(name, s + 100, 9_000)
        t.host("aten::mm", s + 200, 100)
        t.kernel("gemm", s + 300, 8_000, launch=s + 210)
    s = _study(t.write(tmp_path / "vllm.json"))
    (run,) = s["runs"]
    assert run["steps"] == 3
    assert run["step_time_s"]["mean"] == pytest.approx(0.0091, rel=0.02)
    assert any("steps are the 3 'execute_context' annotations" in str(w) for w in s["warnings"])
