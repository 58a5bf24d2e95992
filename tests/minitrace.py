"""A tiny builder of Kineto trace files for tests: round microseconds in, exact seconds out.

Host events go on one main thread (pid 100, tid 1), GPU events on device 0 (pid 0, tid = stream),
gloo collectives on a ``pt_gloo_runloop`` thread. ``kernel``/``memcpy``/``nccl`` also write the
``cudaLaunchKernel`` (zero-length by default) that launched them, with a shared correlation id,
so the step that launched a kernel is known.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PID = 100
MAIN_TID = 1
GLOO_TID = 7
GPU_PID = 0


class MiniTrace:
    """Collects events; ``write`` produces a Kineto JSON file."""

    def __init__(self, rank: int | None = None, world_size: int | None = None) -> None:
        self.rank = rank
        self.world_size = world_size
        self.events: list[dict[str, Any]] = [
            _meta("process_name", PID, 0, "python"),
            _meta("thread_name", PID, MAIN_TID, "thread 1 (python)"),
        ]
        self._corr = 1000
        self._gpu = False
        self._gloo = False

    # -- host side ---------------------------------------------------------------------------
    def host(
        self, name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = MAIN_TID
    ) -> MiniTrace:
        """A host event on the main thread (or ``tid``)."""
        self.events.append(_x(name, cat, PID, tid, ts, dur))
        return self

    def step(self, n: int, ts: float, dur: float) -> MiniTrace:
        return self.host(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")

    def annotation(self, name: str, ts: float, dur: float) -> MiniTrace:
        return self.host(name, ts, dur, cat="user_annotation")

    def dataloader(self, ts: float, dur: float) -> MiniTrace:
        return self.annotation(
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", ts, dur
        )

    def runtime(self, name: str, ts: float, dur: float) -> MiniTrace:
        return self.host(name, ts, dur, cat="cuda_runtime")

    def gloo(self, name: str, ts: float, dur: float) -> MiniTrace:
        """A gloo collective on the pt_gloo_runloop thread."""
        if not self._gloo:
            self.events.append(_meta("thread_name", PID, GLOO_TID, "pt_gloo_runloop"))
            self._gloo = True
        return self.host(name, ts, dur, cat="user_annotation", tid=GLOO_TID)

    # -- device side -------------------------------------------------------------------------
    def _device(
        self,
        name: str,
        cat: str,
        ts: float,
        dur: float,
        launch: float | None,
        stream: int,
        args: dict[str, Any] | None = None,
        launch_dur: float = 0,
        launch_name: str = "cudaLaunchKernel",
    ) -> MiniTrace:
        self._gpu = True
        self._corr += 1
        a: dict[str, Any] = {"device": 0, "stream": stream, "correlation": self._corr}
        a.update(args or {})
        self.events.append(_x(name, cat, GPU_PID, stream, ts, dur, a))
        if launch is not None:
            largs = {"correlation": self._corr}
            self.events.append(
                _x(launch_name, "cuda_runtime", PID, MAIN_TID, launch, launch_dur, largs)
            )
        return self

    def kernel(
        self, name: str, ts: float, dur: float, launch: float | None = None, stream: int = 7
    ) -> MiniTrace:
        """A compute kernel (``launch``: host time of its cudaLaunchKernel, default ``ts``)."""
        return self._device(name, "kernel", ts, dur, ts if launch is None else launch, stream)

    def memcpy(self, ts: float, dur: float, launch: float | None = None) -> MiniTrace:
        return self._device(
            "Memcpy HtoD (Pageable -> Device)",
            "gpu_memcpy",
            ts,
            dur,
            ts if launch is None else launch,
            7,
            {"bytes": 4096},
            launch_name="cudaMemcpyAsync",
        )

    def gpu_wait(self, ts: float, dur: float, cat: str = "kernel") -> MiniTrace:
        """A GPU-side waiting event (``Stream Wait Event`` as kernel, or a ``cuda_sync`` one)."""
        name = "Stream Wait Event" if cat == "kernel" else "Event Sync"
        return self._device(name, cat, ts, dur, None, 7)

    def nccl(
        self,
        ts: float,
        dur: float,
        launch: float | None = None,
        seq: int | None = None,
        name: str = "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
        stream: int = 20,
        extra: dict[str, Any] | None = None,
    ) -> MiniTrace:
        """An NCCL kernel with its args (``extra`` adds or overrides some, e.g. the group's)."""
        args: dict[str, Any] = {
            "Collective name": "allreduce",
            "In msg nelems": 1024,
            "Out msg nelems": 1024,
            "Group size": self.world_size or 1,
            "dtype": "Float",
        }
        if seq is not None:
            args["Seq"] = seq
        args.update(extra or {})
        return self._device(name, "kernel", ts, dur, ts if launch is None else launch, stream, args)

    # -- output ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "Mini GPU"}] if self._gpu else [],
            "traceEvents": self.events,
            "displayTimeUnit": "ms",
        }
        if self.rank is not None:
            doc["distributedInfo"] = {
                "backend": "nccl" if self._gpu else "gloo",
                "rank": self.rank,
                "world_size": self.world_size or 1,
            }
        return doc

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict()))
        return path


def _x(
    name: str,
    cat: str,
    pid: int,
    tid: int,
    ts: float,
    dur: float,
    args: dict[str, Any] | None = None,
) -> dict[str, Any]:
    ev: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid}
    ev.update(ts=ts, dur=dur)
    if args:
        ev["args"] = args
    return ev


def _meta(kind: str, pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": name}}
