"""Intel XPU Kineto traces analyze as CUDA ones do: kernels, copies and fills are device work,
``urEnqueueKernelLaunch`` is the launch that links a kernel to the host, ``urQueueFinish`` is a
blocking sync, oneCCL kernels and ``xccl:`` ranges are communication.

The traces are written the way Kineto's XPU plugin writes them (``tracescale.ingest.devices``
cites the sources): device records on the device's pid with the SYCL queue as ``tid`` and a
``sycl queue`` arg, no ``stream``; host calls in ``xpu_runtime``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tracescale
from tracescale.classify.rank import classify_rank
from tracescale.classify.rules import DEVICE_TARGETS, HOST_TARGETS, classify_events, load_rules
from tracescale.ingest import load_trace
from tracescale.ingest.devices import XPU_LAUNCH_CALLS, XPU_SYNC_CALLS, device_kind
from tracescale.ingest.steps import find_steps
from tracescale.replay.graph.build import DEV, SYNC, build_graph
from tracescale.simulate import pattern_params, simulate

HOST, QUEUE = 100, 3
INTEL = [{"id": 0, "name": "Intel(R) Data Center GPU Max 1550", "vendor": "Intel(R) Corporation"}]
ONECCL = "oneccl_reduce_base<float, 2, 16, 1, 1, 2>"


def X(name: str, ts: float, dur: float, cat: str = "cpu_op", **args: Any) -> dict[str, Any]:
    ev = {"ph": "X", "cat": cat, "name": name, "pid": HOST, "tid": 1, "ts": ts, "dur": dur}
    return {**ev, "args": args} if args else ev


def dev(name: str, cat: str, ts: float, dur: float, corr: int, **args: Any) -> dict[str, Any]:
    """A device record as the XPU plugin writes it: pid = device, tid = SYCL queue."""
    a = {"correlation": corr, "device": 0, "sycl queue": QUEUE, "l0 queue": "0x1", **args}
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": QUEUE, "ts": ts, "dur": dur,
            "args": a}  # fmt: skip


def launch(name: str, ts: float, corr: int, ext: int = -1) -> dict[str, Any]:
    args: dict[str, Any] = {"correlation": corr}
    if ext >= 0:
        args["External id"] = ext
    return X(name, ts, 10, cat="xpu_runtime", **args)


def xpu_step(k: int) -> list[dict[str, Any]]:
    """One 10 ms step (us from its start): host 0-100, gemm 100-3100, copy 3100-4100, fill
    4100-4600, oneCCL allreduce 4600-6600, ``urQueueFinish`` 300-6650 (sync 6600-6650, and
    6650-6750 before the next launch reaches the device), add 6750-9750, idle 9750-10000."""
    t, c = 10_000 * k, 100 * k
    coll = {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024,
            "Group size": 1, "dtype": "Float", "External id": 7000 + k}  # fmt: skip
    return [
        X(f"ProfilerStep#{k}", t, 10_000, cat="user_annotation"),
        X("aten::mm", t, 200),
        launch("urEnqueueKernelLaunch", t + 50, c),
        dev("gemm_kernel", "kernel", t + 100, 3_000, c),
        launch("urEnqueueUSMMemcpy", t + 150, c + 1),
        dev("Memcpy M2D (Device -> Device)", "gpu_memcpy", t + 3_100, 1_000, c + 1, bytes=4096),
        launch("urEnqueueUSMFill", t + 160, c + 2),
        dev("Memset (0 -> Device)", "gpu_memset", t + 4_100, 500, c + 2, bytes=4096),
        X("xccl:all_reduce", t + 170, 70, cat="user_annotation"),
        X("record_param_comms", t + 180, 50, **coll),
        launch("urEnqueueKernelLaunch", t + 200, c + 3, ext=7000 + k),
        dev(ONECCL, "kernel", t + 4_600, 2_000, c + 3, **{"External id": 7000 + k}),
        launch("urQueueFinish", t + 300, c + 4) | {"dur": 6_350},
        X("aten::add", t + 6_650, 100),
        launch("urEnqueueKernelLaunch", t + 6_650, c + 5),
        dev("add_kernel", "kernel", t + 6_750, 3_000, c + 5),
    ]


def xpu_doc(steps: int = 3) -> dict[str, Any]:
    events = [e for k in range(steps) for e in xpu_step(k)]
    meta = {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}}
    return {"schemaVersion": 1, "deviceProperties": INTEL, "traceEvents": [meta, *events],
            "distributedInfo": {"backend": "xccl", "rank": 0, "world_size": 1}}  # fmt: skip


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=0))
    return path


def test_an_xpu_step_has_exact_categories(tmp_path: Path) -> None:
    path = _write(tmp_path / "in" / "xpu.json.gz", xpu_doc())
    (s,) = tracescale.analyze(str(path), jobs=1, no_cache=True).to_dict()["studies"]
    (run,) = s["runs"]
    assert (run["kind"], run["analyzed_as"], run["device"]) == ("gpu", "gpu", "xpu")
    want = {"compute": 6.0, "memcpy": 1.5, "communication": 2.0, "sync": 0.15, "host": 0.1,
            "idle": 0.25, "dataloader": 0.0, "reduction": 0.0}  # fmt: skip
    got = {c: round(v * 1e3, 9) for c, v in run["breakdown_s"].items()}
    assert got == want
    assert run["step_time_s"]["mean"] == pytest.approx(0.010, abs=1e-12)
    assert not [w for w in run["warnings"] if "device" in w]


def test_xpu_ingest_reads_the_queue_as_stream_and_the_family(tmp_path: Path) -> None:
    trace = load_trace(str(_write(tmp_path / "xpu.json.gz", xpu_doc(1))))
    ev = trace.events
    assert set(ev.stream[ev.is_device].tolist()) == {QUEUE}
    assert device_kind(trace).family == "xpu"
    result = classify_rank(trace, load_rules())
    assert result.device == "xpu" and result.unknown_devices == ()
    (coll,) = result.collectives.itertuples()
    assert coll.collective == "allreduce" and coll.bytes == 4096


def test_every_reader_takes_the_sycl_queue_as_stream(tmp_path: Path) -> None:
    pytest.importorskip("numba")
    from tracescale.ingest import fast
    from tracescale.ingest.lenient import load_lenient

    data = json.dumps(xpu_doc(1)).encode()
    fast.warm_up()
    top, builder = fast.build_columns(fast.scan_trace(data))
    scanned = builder.finish("x.json", len(data), top, 0)
    for trace in (scanned, load_lenient(data, "x.json", len(data))):
        ev = trace.events
        assert ev.stream[ev.is_device].tolist() == [QUEUE] * 5
        assert (ev.stream[~ev.is_device] == -1).all()


def test_xpu_launches_link_kernels_and_finish_waits_for_them(tmp_path: Path) -> None:
    """The replay graph: every device record hangs off its launch call (by correlation, as
    CUDA's), and each ``urQueueFinish`` waits for the last device work launched before it."""
    trace = load_trace(str(_write(tmp_path / "xpu.json.gz", xpu_doc())))
    coll = classify_rank(trace, load_rules()).collectives
    g = build_graph(trace, find_steps(trace), coll)
    device = np.flatnonzero(g.kind >= DEV)
    assert len(device) == 15 and (g.dep[device] >= 0).all()
    syncs = np.flatnonzero(g.kind == SYNC)
    assert len(syncs) == 3 and (g.dep2[syncs] >= 0).all()
    awaited_end = (g.start + g.dur)[g.dep2[syncs]] - g.start[syncs]
    assert awaited_end.tolist() == [6_300_000] * 3  # the oneCCL kernel ends at 6600 us


def test_xpu_names_classify_like_their_cuda_counterparts() -> None:
    rules = load_rules()
    names = (*sorted(XPU_SYNC_CALLS), "xccl:all_reduce", "xccl::allreduce", "ccl::allreduce",
             *sorted(XPU_LAUNCH_CALLS))  # fmt: skip
    strings = (*names, "xpu_runtime")
    ids = np.arange(len(names), dtype=np.int32)
    cats = np.full(len(names), len(names), dtype=np.int32)
    host = classify_events(rules.host, (*HOST_TARGETS, "compute"), strings, ids, cats)
    got = [(HOST_TARGETS[t] if 0 <= t < len(HOST_TARGETS) else None) for t in host.tolist()]
    n_sync = len(XPU_SYNC_CALLS)
    assert got[:n_sync] == ["sync"] * n_sync
    assert got[n_sync : n_sync + 3] == ["communication"] * 3
    assert set(got[n_sync + 3 :]) == {None}  # launches are host time, not sync
    kernels = ("kernel", ONECCL, "gemm_kernel", "Memcpy M2D (Device -> Device)")
    ids = np.array([1, 2, 3], dtype=np.int32)
    dev_t = classify_events(rules.device, DEVICE_TARGETS, kernels, ids, np.zeros(3, np.int32))
    assert [DEVICE_TARGETS[t] for t in dev_t.tolist()] == ["communication", "compute", "memcpy"]


_RENAME = {
    "cudaLaunchKernel": "urEnqueueKernelLaunch",
    "cudaMemcpyAsync": "urEnqueueUSMMemcpy",
    "cudaStreamSynchronize": "urQueueFinish",
    "cudaStreamWaitEvent": "urEnqueueEventsWaitWithBarrier",
}
_COLL_ARGS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype", "Seq",
              "Process Group Name", "Process Group Description", "Process Group Ranks")  # fmt: skip


def _as_xpu(doc: dict[str, Any]) -> dict[str, Any]:
    """A simulated CUDA rank rewritten in XPU's vocabulary: UR calls, SYCL queues, oneCCL
    kernels without collective args (their sizes on record_param_comms), no cuda_sync."""
    out = []
    for e in doc["traceEvents"]:
        if e.get("cat") == "cuda_sync":
            continue
        e = dict(e)
        if e.get("cat") == "cuda_runtime":
            e["cat"], e["name"] = "xpu_runtime", _RENAME.get(e["name"], e["name"])
        elif e.get("name", "").startswith("nccl:"):
            e["name"] = "x" + e["name"]
        elif e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            args = {k: v for k, v in e["args"].items() if k not in ("stream", *_COLL_ARGS)}
            e["args"] = {**args, "sycl queue": e["tid"]}
            if e["name"].startswith("ncclDevKernel"):
                e["name"] = ONECCL
        out.append(e)
    dist = {**doc["distributedInfo"], "backend": "xccl"}
    dist["pg_config"] = [{**pg, "backend_config": "xpu:xccl"} for pg in dist["pg_config"]]
    dist.pop("nccl_version", None)
    return {**doc, "traceEvents": out, "deviceProperties": INTEL, "distributedInfo": dist}


@pytest.fixture(scope="module")
def twin_studies(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], ...]:
    """The same simulated DDP study at N = 2 and 4, as CUDA wrote it and rewritten as XPU."""
    base = tmp_path_factory.mktemp("twins")
    cuda, xpu = base / "cuda", base / "xpu"
    simulate([2, 4], cuda, pattern="ddp", seed=3, params=pattern_params("ddp", {"layers": 4}))
    for path in sorted(cuda.glob("ws*/*.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        _write(xpu / path.parent.name / path.name, _as_xpu(doc))
    return tuple(
        tracescale.analyze(str(p), jobs=1, no_cache=True, project=[8]).to_dict()["studies"][0]
        for p in (cuda, xpu)
    )


def test_a_multi_rank_xpu_study_replays_and_projects_like_cuda(
    twin_studies: tuple[dict[str, Any], ...],
) -> None:
    cuda, xpu = twin_studies
    assert [r["world_size"] for r in xpu["runs"]] == [2, 4]
    for c, x in zip(cuda["runs"], xpu["runs"], strict=True):
        assert (x["kind"], x["device"], c["device"]) == ("gpu", "xpu", "cuda")
        assert x["replay_error"] <= 0.02, x["world_size"]
        step = c["step_time_s"]["mean"]
        assert x["step_time_s"]["mean"] == pytest.approx(step, rel=1e-9)
        for cat, sec in c["breakdown_s"].items():
            assert abs(x["breakdown_s"][cat] - sec) <= 0.01 * step, (cat, x["world_size"])
        by_type = c["communication_by_collective_s"]
        assert x["communication_by_collective_s"] == pytest.approx(by_type, abs=0.01 * step)
    (pc,), (px,) = cuda["scaling"]["projections"], xpu["scaling"]["projections"]
    assert px["world_size"] == 8 and px["speedup"] == pytest.approx(pc["speedup"], rel=0.03)
