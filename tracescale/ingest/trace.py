"""The per-rank columnar trace that ingest hands to classify.

One row per complete (``ph == "X"``) event, numpy columns, names as ids into one string table:
a 200k-event rank costs a few MB instead of the ~1 KB per event of a dict or DataFrame row.
Times are int64 nanoseconds (absolute, ``ts * 1000``) so interval logic is exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
BOOL = npt.NDArray[np.bool_]

#: Event categories that run on a device (GPU/accelerator) rather than a host thread.
#: 2021 traces spell them ``Kernel``/``Memcpy``/``Memset``; MTIA uses ``mtia_ccp_events``.
DEVICE_CATEGORIES: frozenset[str] = frozenset(
    {
        "kernel",
        "Kernel",
        "gpu_memcpy",
        "Memcpy",
        "gpu_memset",
        "Memset",
        "cuda_sync",
        "gpu_user_annotation",
        "mtia_ccp_events",
    }
)


#: Prefix of the per-step names (``ProfilerStep#12``): one distinct name per step.
STEP_PREFIX = "ProfilerStep#"


def is_step_name(text: str) -> bool:
    """True for ``ProfilerStep#`` followed by ASCII digits only: a prefix test, no regex."""
    digits = text[len(STEP_PREFIX) :]
    return text.startswith(STEP_PREFIX) and digits.isdigit() and digits.isascii()


@dataclass(frozen=True)
class PGConfig:
    """One process group from ``distributedInfo.pg_config``."""

    name: str
    desc: str
    backend: str
    size: int
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class TraceMeta:
    """File-level facts: who wrote the trace and for which rank."""

    path: str
    size_bytes: int
    rank: int | None
    world_size: int | None
    backend: str | None
    pg_config: tuple[PGConfig, ...]
    device_names: tuple[str, ...]
    schema_version: int | None
    base_time_ns: int | None
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    process_labels: dict[int, str] = field(default_factory=dict)
    total_events: int = 0
    skipped: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class EventColumns:
    """Columnar events. Missing values: -1 for ids and ints."""

    start: I64  # ns, absolute
    dur: I64  # ns, >= 0
    pid: I64  # string pids get negative ids (see TraceMeta / RankTrace.pid_names)
    tid: I64
    cat: I32  # id into strings
    name: I32  # id into strings
    device: I64
    stream: I64  # some traces write 4294967295 (uint32 -1)
    correlation: I64
    external_id: I64
    coll_name: I32  # NCCL "Collective name" id, -1
    in_nelems: I64
    out_nelems: I64
    group_size: I64
    dtype: I32  # id, -1
    seq: I64
    nbytes: I64  # memcpy "bytes"
    wait_on_stream: I64  # cuda_sync events: the producer stream waited on, -1
    wait_on_corr: I64  # cuda_sync events: correlation of the awaited cudaEventRecord, -1
    input_dims: I32  # raw JSON text of "Input Dims" as a string id, -1
    input_type: I32  # raw JSON text of "Input type" as a string id, -1
    is_device: BOOL
    pg_name: I32  # record_param_comms "Process Group Name" id, -1
    pg_ranks: I32  # raw JSON text of "Process Group Ranks" as a string id, -1 (ingest.groups)
    pg_desc: I32  # "Process Group Description" id (DeviceMesh: "mesh_<dim>"), -1
    rank_start: I32  # "Global rank start": the group's first listed rank, -1
    rank_stride: I32  # "Global rank stride": its members' common difference (0: one rank), -1
    rf_id: I64  # cpu_op "Record function id" (an execution trace's node rf_id), -1

    def __len__(self) -> int:
        return int(self.start.shape[0])

    def take(self, index: npt.NDArray[np.intp] | BOOL) -> EventColumns:
        """Rows selected by an index or mask, all columns together."""
        return EventColumns(**{k: v[index] for k, v in self.__dict__.items()})


@dataclass(frozen=True)
class RankTrace:
    """One rank's trace: metadata, string table and columnar events (sorted by start)."""

    meta: TraceMeta
    strings: tuple[str, ...]
    events: EventColumns
    pid_names: dict[int, str] = field(default_factory=dict)

    def string_id(self, text: str) -> int:
        """Id of ``text`` in the table, -1 when absent (no event uses it)."""
        try:
            return self.strings.index(text)
        except ValueError:
            return -1

    def names(self, ids: npt.NDArray[np.int32]) -> list[str]:
        """Decode string ids (-1 -> empty string)."""
        table = self.strings
        return [table[i] if i >= 0 else "" for i in ids.tolist()]

    def string_mask(self, predicate: Callable[[str], bool], *, steps_alike: bool = False) -> BOOL:
        """Boolean array over the string table: which strings satisfy ``predicate(str)``.

        ``steps_alike``: the predicate cannot tell ``ProfilerStep#N`` names apart (a test of
        another prefix, or of equality with other names), so it is asked once for all of them.
        A trace of a million steps holds a million such names, and each call would otherwise
        walk them all in Python.
        """
        if not steps_alike:
            return np.fromiter(
                map(predicate, self.strings), dtype=np.bool_, count=len(self.strings)
            )
        steps, others, other_text = self._step_split
        out = np.zeros(len(self.strings), dtype=np.bool_)
        out[others] = np.fromiter(map(predicate, other_text), dtype=np.bool_, count=len(others))
        if len(steps):
            out[steps] = bool(predicate(self.strings[int(steps[0])]))
        return out

    @cached_property
    def step_names(self) -> BOOL:
        """Which strings are ``ProfilerStep#N`` names (:func:`is_step_name`), found once."""
        return np.fromiter(map(is_step_name, self.strings), np.bool_, len(self.strings))

    @cached_property
    def _step_split(self) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], tuple[str, ...]]:
        """Ids of the step names, ids of the others and the others' text, found once."""
        is_step = self.step_names
        others = np.flatnonzero(~is_step)
        table = self.strings
        return np.flatnonzero(is_step), others, tuple(table[i] for i in others.tolist())

    @property
    def span_ns(self) -> tuple[int, int]:
        """First start and last end over all events (0, 0 when empty)."""
        ev = self.events
        if len(ev) == 0:
            return 0, 0
        return int(ev.start.min()), int((ev.start + ev.dur).max())
