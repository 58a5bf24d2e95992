"""Kineto event construction for one rank: ids, nesting, launch correlation.

The schedule decides *when* things happen (integer ns); this module decides what the trace
says about them, shaped like real PyTorch 2.x traces (see ../shared/KINETO_NOTES.md). With
``enabled=False`` every call is a no-op so the timing pass costs no dict building.
"""

from __future__ import annotations

from typing import Any

COMPUTE_STREAM = 7
COMM_STREAM = 13
#: point-to-point NCCL streams of a pipeline stage (receives, sends): PyTorch gives each
#: peer pair's communicator its own stream; one each keeps a send from queueing behind a recv
RECV_STREAM = 21
SEND_STREAM = 22

Event = dict[str, Any]


def us(ns: int) -> float:
    """Integer ns -> float µs whose shortest repr has at most 3 decimals (ns precision)."""
    return ns / 1000


class Emitter:
    """Collects one rank's events; hands out External ids and correlation ids in order."""

    def __init__(self, *, rank: int, pid: int, device: int, enabled: bool) -> None:
        self.enabled = enabled
        self.rank = rank
        self.pid = pid
        self.tid = pid  # the main thread: tid == pid, as in real traces
        self.device = device
        self.events: list[Event] = []
        self._ext = 1
        self._corr = 100_000 + 7 * rank

    def next_ext(self) -> int:
        self._ext += 1
        return self._ext

    def next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def host(self, cat: str, name: str, start: int, end: int, args: dict[str, Any]) -> None:
        """A complete event on the main thread."""
        if self.enabled:
            self.events.append(
                {
                    "ph": "X",
                    "cat": cat,
                    "name": name,
                    "pid": self.pid,
                    "tid": self.tid,
                    "ts": us(start),
                    "dur": us(end - start),
                    "args": args,
                }
            )

    def op(self, cat: str, name: str, start: int, end: int, **extra: Any) -> int:
        """A cpu_op / user_annotation with a fresh External id; returns the id."""
        if not self.enabled:
            return 0
        ext = self.next_ext()
        args: dict[str, Any] = {"External id": ext, "Record function id": ext}
        args.update(extra)
        self.host(cat, name, start, end, args)
        return ext

    def runtime(self, name: str, start: int, end: int, ext: int) -> int:
        """A cuda_runtime call; returns its correlation id (shared with the GPU event)."""
        if not self.enabled:
            return 0
        corr = self.next_corr()
        cbid = {"cudaLaunchKernel": 211, "cudaMemcpyAsync": 41}.get(name, 131)
        self.host(
            "cuda_runtime",
            name,
            start,
            end,
            {"External id": ext, "cbid": cbid, "correlation": corr},
        )
        return corr

    def gpu(
        self,
        cat: str,
        name: str,
        stream: int,
        start: int,
        end: int,
        ext: int,
        corr: int,
        **extra: Any,
    ) -> None:
        """A GPU event (kernel, gpu_memcpy, cuda_sync) on ``stream`` of this rank's device."""
        if not self.enabled:
            return
        args: dict[str, Any] = {
            "External id": ext,
            "queued": 0,
            "device": self.device,
            "context": 1,
            "stream": stream,
            "correlation": corr,
        }
        args.update(extra)
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": self.device,
                "tid": stream,
                "ts": us(start),
                "dur": us(end - start),
                "args": args,
            }
        )

    def metadata(self, ts: int) -> list[Event]:
        """process/thread name metadata (``M`` events) for the host process and the GPU."""
        t = us(ts)

        def meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> Event:
            return {"name": name, "ph": "M", "ts": t, "pid": pid, "tid": tid, "args": args}

        dev = self.device
        return [
            meta("process_name", self.pid, 0, {"name": "python3"}),
            meta("process_labels", self.pid, 0, {"labels": "CPU"}),
            meta("process_sort_index", self.pid, 0, {"sort_index": self.pid}),
            meta("process_name", dev, 0, {"name": "python3"}),
            meta("process_labels", dev, 0, {"labels": f"GPU {dev}"}),
            meta("process_sort_index", dev, 0, {"sort_index": 16777216 + dev}),
            meta("thread_name", self.pid, self.tid, {"name": f"thread {self.tid} (python3)"}),
            meta("thread_sort_index", self.pid, self.tid, {"sort_index": self.tid}),
            meta("thread_name", dev, COMPUTE_STREAM, {"name": f"stream {COMPUTE_STREAM} "}),
            meta("thread_sort_index", dev, COMPUTE_STREAM, {"sort_index": COMPUTE_STREAM}),
            meta("thread_name", dev, COMM_STREAM, {"name": f"stream {COMM_STREAM} "}),
            meta("thread_sort_index", dev, COMM_STREAM, {"sort_index": COMM_STREAM}),
        ]


def nest_launch(
    em: Emitter, ops: tuple[str, ...], runtime: str, start: int, cost: int
) -> tuple[int, int, int]:
    """Host op chain (outermost first) ending in a runtime call; returns (ext, corr, launch_end).

    The ops fill ``[start, start+cost]`` so the main thread has no untraced gaps; the runtime
    call ends a quarter of ``cost`` before the op returns, when the GPU may pick the work up.
    """
    step = cost // 16
    launch_end = start + cost - cost // 4
    launch_start = launch_end - cost // 3
    ext = 0
    for depth, name in enumerate(ops):
        ext = em.op("cpu_op", name, start + depth * step, start + cost - depth * step)
    corr = em.runtime(runtime, launch_start, launch_end, ext)
    return ext, corr, launch_end


def host_ops(em: Emitter, names: tuple[str, ...], start: int, end: int) -> None:
    """Contiguous cpu_ops covering ``[start, end]`` (host work that launches nothing)."""
    if end <= start:
        return
    count = len(names)
    for i, name in enumerate(names):
        a = start + (end - start) * i // count
        b = start + (end - start) * (i + 1) // count
        if b > a:
            em.op("cpu_op", name, a, b)
