"""Kineto traces of one workload in several shapes, for the tests that hold the work linear in
the events: the same units of work (a host op launching a kernel, then, every other unit, a
data-loading annotation and a stream sync), laid out as the common shape (a few steps, one
stream, one process group) or spread over many steps, many streams or many process groups.

A unit takes 20 us on the host; its kernel runs 8 us on the GPU. ``groups`` shapes add an NCCL
AllReduce per unit (launched by ``record_param_comms`` with its process group) and write two
ranks; the others write one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

PID = 100
TID = 1
UNIT_US = 20.0
#: Steps of the common shape.
FEW_STEPS = 4


def write_study(root: Path, units: int, *, steps: int = FEW_STEPS, streams: int = 1,
                groups: int = 0, ranks: int = 0) -> Path:  # fmt: skip
    """A study folder under ``root`` holding ``units`` units in ``steps`` ProfilerSteps, their
    kernels round-robin on ``streams`` streams and, with ``groups`` > 0, one AllReduce per unit
    round-robin over that many process groups, in a run of ``ranks`` ranks (default: two with
    groups, else one)."""
    ranks = ranks or (2 if groups else 1)
    run = root / f"ws{ranks}"
    run.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        events = _events(units, steps, streams, groups, rank)
        doc: dict[str, Any] = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "Linear GPU"}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": ranks},
            "traceEvents": events,
            "displayTimeUnit": "ms",
        }
        (run / f"rank{rank}.pt.trace.json").write_bytes(msgspec.json.encode(doc))
    return root


def _x(name: str, cat: str, tid: int, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    pid = 0 if cat in ("kernel", "gpu_memcpy") else PID
    ev: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
                          "ts": round(ts, 3), "dur": dur}  # fmt: skip
    if args:
        ev["args"] = args
    return ev


def _events(units: int, steps: int, streams: int, groups: int, rank: int) -> list[dict[str, Any]]:
    ev: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": TID, "args": {"name": "main"}},
    ]
    per_step = -(-units // steps)
    seq: dict[int, int] = {}
    t0 = 1000.0
    for s in range(steps):
        first, last = s * per_step, min((s + 1) * per_step, units)
        if first >= last:
            break
        span = (last - first) * UNIT_US + (5.0 if groups else 0.0) * (last - first)
        ev.append(_x(f"ProfilerStep#{s}", "user_annotation", TID, t0, span))
        t = t0
        for u in range(first, last):
            corr = 10 * u + 1
            stream = 7 + u % streams
            if u % 2 == 0:
                ev.append(_x("enumerate(DataLoader)#_DataLoaderIter.__next__", "user_annotation",
                             TID, t, 3.0))  # fmt: skip
            ev.append(_x("aten::mm", "cpu_op", TID, t + 4, 4.0))
            ev.append(_x("cudaLaunchKernel", "cuda_runtime", TID, t + 5, 2.0, correlation=corr))
            ev.append(_x("gemm_kernel", "kernel", stream, t + 8, 8.0, device=0, stream=stream,
                         correlation=corr))  # fmt: skip
            if u % 2 == 1:
                ev.append(_x("cudaStreamSynchronize", "cuda_runtime", TID, t + 9, 8.0,
                             correlation=corr + 1))  # fmt: skip
            t += UNIT_US
            if groups:
                pg = u % groups
                seq[pg] = seq.get(pg, -1) + 1
                comm = {"Collective name": "allreduce", "In msg nelems": 256,
                        "Out msg nelems": 256, "Group size": 2, "dtype": "Float",
                        "Process Group Name": str(pg), "Process Group Ranks": "[0, 1]",
                        "Seq": seq[pg]}  # fmt: skip
                ev.append(_x("record_param_comms", "cpu_op", TID, t, 3.0, **comm))
                ev.append(_x("cudaLaunchKernel", "cuda_runtime", TID, t + 1, 1.0,
                             correlation=corr + 2))  # fmt: skip
                ev.append(_x("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 20,
                             t + 2 + rank * 0.5, 2.0, device=0, stream=20, correlation=corr + 2,
                             **comm))  # fmt: skip
                t += 5.0
        t0 = t
    return ev
