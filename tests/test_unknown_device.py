"""A device the rules do not know is said, not guessed: the run is analyzed for what its known
events tell, one warning per run names what was not recognised, and its ``kind`` in the JSON
stays ``unknown`` (``analyzed_as`` says how it was read)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tracescale
from tests.minitrace import GPU_PID, MiniTrace
from tracescale.ingest import load_trace
from tracescale.ingest.devices import DeviceKind, device_kind

CPU_NOTE = (
    "unknown device kind (event category 'npu_kernel', device type 'NPU') on {n}: none of its "
    "events is counted as device work; the run is analyzed from its host threads alone "
    '(kind "unknown" in the JSON)'
)
GPU_NOTE = (
    "unknown device kind (device type 'NPU') on 1 rank: its kernel, gpu_memcpy and gpu_memset "
    "events are analyzed as device work as on CUDA; other device events are not counted "
    '(kind "unknown" in the JSON)'
)


def _label(t: MiniTrace, text: str) -> None:
    t.events.append(
        {"ph": "M", "name": "process_labels", "pid": GPU_PID, "tid": 0, "args": {"labels": text}}
    )


def _device(t: MiniTrace, cat: str, name: str, ts: float, dur: float) -> None:
    t.events.append({"ph": "X", "cat": cat, "name": name, "pid": GPU_PID, "tid": 5, "ts": ts,
                     "dur": dur, "args": {"device": 0}})  # fmt: skip


def npu_trace(rank: int | None = None, world: int | None = None) -> MiniTrace:
    """Per 10 ms step: host ops 0-4000 and 5000-8000 us (compute on a CPU run), untraced host
    time between; an NPU records its matmul in a category Kineto has no name for."""
    t = MiniTrace(rank, world)
    _label(t, "NPU 0")
    for k in range(3):
        s = 10_000 * k
        t.step(k, s, 10_000).host("aten::mm", s, 4_000).host("aten::add", s + 5_000, 3_000)
        _device(t, "npu_kernel", "MatMul", s + 100, 3_000)
    return t


def _analyze(path: Path) -> dict[str, Any]:
    (s,) = tracescale.analyze(str(path), jobs=1, no_cache=True).to_dict()["studies"]
    return s


def test_unknown_device_events_are_said_and_the_host_is_analyzed(tmp_path: Path) -> None:
    s = _analyze(npu_trace().write(tmp_path / "in" / "npu.json"))
    (run,) = s["runs"]
    assert (run["kind"], run["analyzed_as"], run["device"]) == ("unknown", "cpu", "unknown")
    got = {c: round(v * 1e3, 9) for c, v in run["breakdown_s"].items() if v}
    assert got == {"compute": 7.0, "host": 3.0}
    notes = [w for w in run["warnings"] if "unknown device" in w]
    assert notes == [CPU_NOTE.format(n="1 rank")]


def test_the_warning_is_one_per_run_not_per_rank_or_event(tmp_path: Path) -> None:
    folder = tmp_path / "ws2"
    for r in range(2):
        npu_trace(r, 2).write(folder / f"rank{r}.json")
    s = _analyze(folder)
    (run,) = s["runs"]
    assert [w for w in run["warnings"] if "unknown device" in w] == [CPU_NOTE.format(n="2 ranks")]
    assert [w for w in s["warnings"] if "unknown device" in w] == [CPU_NOTE.format(n="2 ranks")]


def test_known_kernels_on_an_unknown_device_count_and_are_said(tmp_path: Path) -> None:
    t = MiniTrace()
    _label(t, "NPU 0")
    for k in range(2):
        s = 10_000 * k
        t.step(k, s, 10_000).host("aten::mm", s, 500).kernel("MatMul", s + 1_000, 6_000)
    (run,) = _analyze(t.write(tmp_path / "in" / "npu.json"))["runs"]
    assert (run["kind"], run["analyzed_as"], run["device"]) == ("unknown", "gpu", "unknown")
    assert round(run["breakdown_s"]["compute"] * 1e3, 9) == 6.0
    assert [w for w in run["warnings"] if "unknown device" in w] == [GPU_NOTE]


def test_an_unrecognised_device_property_is_unknown(tmp_path: Path) -> None:
    doc = MiniTrace().step(0, 0, 1_000).host("aten::mm", 0, 800).to_dict()
    doc["deviceProperties"] = [{"id": 0, "name": "Ascend910B"}]
    path = tmp_path / "asc.json"
    path.write_text(json.dumps(doc))
    kind = device_kind(load_trace(str(path)))
    assert (kind.family, kind.unknown) == ("unknown", ("device 'Ascend910B'",))


def test_an_unnamed_device_is_not_unknown(tmp_path: Path) -> None:
    """ROCm traces of MI300s (TraceLens's vLLM captures) leave ``deviceProperties`` names
    empty; an empty name says nothing, and the trace's kernels make it a GPU run."""
    doc = MiniTrace().step(0, 0, 1_000).kernel("gemm", 10, 500).to_dict()
    doc["deviceProperties"] = [{"id": 0, "name": ""}, {"id": 1, "name": "gfx942"}]
    path = tmp_path / "mi300.json"
    path.write_text(json.dumps(doc))
    kind = device_kind(load_trace(str(path)))
    assert kind.unknown == () and kind.family != "unknown"


def test_a_user_category_on_a_host_thread_is_no_device(tmp_path: Path) -> None:
    t = MiniTrace().step(0, 0, 1_000).host("aten::mm", 0, 500).host("mine", 600, 100, cat="my_cat")
    kind = device_kind(load_trace(str(t.write(tmp_path / "host.json"))), main_pid=100)
    assert (kind.family, kind.unknown) == ("cpu", ())
    t.kernel("k", 100, 200)
    assert device_kind(load_trace(str(t.write(tmp_path / "gpu.json")))).family == "cuda"


@pytest.mark.parametrize(
    ("folder", "family"),
    [("amd_trace", "rocm"), ("nccl_parser_config", "cuda"), ("cpu_only", "cpu")],
)
def test_real_traces_name_their_family(shared_traces: Path, folder: str, family: str) -> None:
    path = sorted((shared_traces / "hta" / folder).glob("*.json*"))[0]
    assert device_kind(load_trace(str(path))) == DeviceKind(family)
