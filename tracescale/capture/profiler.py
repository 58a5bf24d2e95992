"""A ``torch.profiler`` wrapper that writes one gzip Kineto trace per rank into ``OUT/ws{N}/``.

Why a helper: a scaling study needs the same profiler settings at every world size and a
predictable folder layout (``ws1/``, ``ws2/``, ...) that ``tracescale sweep`` and the analyzer
agree on. The output folder comes from ``$TRACESCALE_OUT`` so the sweep can steer a script
without changing its command line.

Usage, after ``torch.distributed.init_process_group`` (so the trace gets ``distributedInfo``)::

    with Capture(wait=1, warmup=1, active=5) as cap:
        for batch in loader:
            train_step(batch)
            cap.step()
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

from tracescale.errors import UsageError

OUT_ENV = "TRACESCALE_OUT"
"""Environment variable holding the study folder (``tracescale sweep --out`` sets it)."""


def _import_torch() -> ModuleType:
    """Import torch on first use so the analysis side never depends on it."""
    try:
        return importlib.import_module("torch")
    except ImportError as exc:
        raise UsageError(
            "tracescale.capture needs PyTorch: install the 'capture' extra "
            "(pip install 'tracescale[capture]') or torch itself"
        ) from exc


def _rank_and_world_size(torch: ModuleType) -> tuple[int, int]:
    """Rank and world size from the process group if there is one, else torchrun's env vars."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def world_out_dir(out: str | os.PathLike[str] | None, world_size: int) -> Path:
    """Folder of one run, ``OUT/ws{world_size}``; OUT is the argument, else ``$TRACESCALE_OUT``."""
    base = out if out is not None else os.environ.get(OUT_ENV)
    if not base:
        raise UsageError(f"no output folder: pass out=... or set ${OUT_ENV}")
    if world_size < 1:
        raise UsageError(f"world size must be >= 1, got {world_size}")
    return Path(base) / f"ws{world_size}"


class Capture:
    """Context manager around ``torch.profiler.profile`` with a wait/warmup/active schedule.

    Records CPU (and CUDA when available) activity with shapes, one window (``repeat=1``) so
    each rank writes exactly one ``*.pt.trace.json.gz``. Steps are marked ``ProfilerStep#N``
    by the profiler each time :meth:`step` is called. Enter it after the process group is
    initialized: the profiler reads rank and world size from it for ``distributedInfo``.
    """

    def __init__(
        self,
        out: str | os.PathLike[str] | None = None,
        *,
        wait: int = 1,
        warmup: int = 1,
        active: int = 5,
        skip_first: int = 0,
        record_shapes: bool = True,
        with_stack: bool = False,
        profile_memory: bool = False,
        worker_name: str | None = None,
    ) -> None:
        if wait < 0 or warmup < 0 or skip_first < 0 or active < 1:
            raise UsageError(
                "profiler schedule needs wait, warmup, skip_first >= 0 and active >= 1, got "
                f"wait={wait} warmup={warmup} active={active} skip_first={skip_first}"
            )
        self._out = out
        self.wait = wait
        self.warmup = warmup
        self.active = active
        self.skip_first = skip_first
        self.record_shapes = record_shapes
        self.with_stack = with_stack
        self.profile_memory = profile_memory
        self.worker_name = worker_name
        self.out_dir: Path | None = None
        self.rank = 0
        self.world_size = 1
        self._prof: Any = None

    @property
    def steps_needed(self) -> int:
        """Calls to :meth:`step` before the trace is written (the whole schedule)."""
        return self.skip_first + self.wait + self.warmup + self.active

    def __enter__(self) -> Capture:
        torch = _import_torch()
        profiler = importlib.import_module("torch.profiler")
        self.rank, self.world_size = _rank_and_world_size(torch)
        self.out_dir = world_out_dir(self._out, self.world_size)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        activities = [profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(profiler.ProfilerActivity.CUDA)
        self._prof = profiler.profile(
            activities=activities,
            schedule=profiler.schedule(
                wait=self.wait,
                warmup=self.warmup,
                active=self.active,
                repeat=1,
                skip_first=self.skip_first,
            ),
            on_trace_ready=profiler.tensorboard_trace_handler(
                str(self.out_dir), worker_name=self.worker_name, use_gzip=True
            ),
            record_shapes=self.record_shapes,
            with_stack=self.with_stack,
            profile_memory=self.profile_memory,
        )
        self._prof.__enter__()
        return self

    def step(self) -> None:
        """Mark the end of one training step (advances the profiler schedule)."""
        if self._prof is None:
            raise UsageError("Capture.step() called outside 'with Capture(...)'")
        self._prof.step()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        prof, self._prof = self._prof, None
        if prof is not None:
            prof.__exit__(exc_type, exc, tb)
