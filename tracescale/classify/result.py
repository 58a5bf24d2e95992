"""What the classify stage hands to scaling and reporting: per-step tables in seconds.

Everything here is compact (one row per rank and step, one row per collective instance), so a
parent process can hold thousands of ranks of it while the events themselves stay in workers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tracescale.categories import CATEGORIES
from tracescale.groups import series_mean
from tracescale.table import FrameField, table_of

#: Categories whose time can include another rank's lateness: a rank that waited for a straggler
#: has that wait in the straggler's category, and ``caused_<category>`` says how much of it.
CAUSED: tuple[str, ...] = ("compute", "memcpy", "dataloader")

#: Columns of :attr:`RunBreakdown.steps` besides the eight category columns (all seconds
#: unless noted). Category columns sum to ``duration`` for every row.
STEP_COLUMNS: tuple[str, ...] = (
    "rank",  # int
    "step",  # int, the N of ProfilerStep#N (0.. when the trace has no steps)
    "start",  # seconds since the rank's first event; informational only
    "duration",  # step window length
    *CATEGORIES,
    "overlapped_communication",  # communication kernel time hidden under compute (not in the sum)
    "communication_wait",  # raw time spent waiting in collectives for late ranks (before cause)
    "comm_transfer",  # busy time (union) of communication kernels / gloo transfers in the step
    "overlap_window",  # compute busy time between the step's first comm start and last comm end
    "serial_compute",  # compute inside replicated regions (Optimizer.*): serial in weak scaling
    *(f"caused_{c}" for c in CAUSED),  # part of the category that is waiting for a late rank
)

#: Columns of :attr:`RunBreakdown.collectives`: one row per collective instance per rank.
COLLECTIVE_COLUMNS: tuple[str, ...] = (
    "rank",  # int
    "step",  # int
    "collective",  # one of categories.COLLECTIVE_TYPES
    "seq",  # int, order of the instance within the rank (or the trace's Seq)
    "bytes",  # int, message size per rank (-1 when unknown)
    "group_size",  # int
    "start",  # seconds, same clock as steps.start
    "duration",  # seconds on this rank
    "transfer",  # shortest duration of this instance over all ranks of the run
    "wait",  # duration - transfer
    "exposed",  # part not overlapped by compute
    "hideable",  # compute the rank ran from this instance's launch to its wait point (async only)
    "async",  # bool: runs beside the main thread (NCCL kernel, gloo thread), not a host block
    "pg",  # process group instance, "name:members" (ingest.groups.group_key; '' when
    # unknown): instances are keyed by (pg, collective, seq)
)


@dataclass(frozen=True)
class RunBreakdown:
    """One run (one world size, possibly pooled repeats): where each step's time went.

    ``steps`` has :data:`STEP_COLUMNS`; ``collectives`` has :data:`COLLECTIVE_COLUMNS`;
    ``communication_by_collective`` maps collective type -> mean exposed seconds per step.
    """

    world_size: int
    ranks: tuple[int, ...]
    paths: tuple[str, ...]
    #: Frame fields are stored as table.Table (the analyze path reads those, table.table_of);
    #: reading the attribute builds the pandas frame.
    steps: FrameField = FrameField(required=True)  # noqa: RUF009 (a descriptor)
    collectives: FrameField = FrameField(required=True)  # noqa: RUF009 (a descriptor)
    communication_by_collective: dict[str, float] = field(default_factory=dict)
    kind: str = "gpu"  # "gpu" or "cpu": which resource was treated as critical
    #: accelerator family (ingest.devices): cuda, rocm, xpu, mtia, gpu, cpu or unknown
    device: str = "gpu"
    warnings: tuple[str, ...] = ()
    #: Top contributors: category, name, seconds (mean per step per rank), step_sd, steps
    #: (see classify.top_ops.run_op_table).
    ops: FrameField = FrameField()  # noqa: RUF009 (a descriptor)
    #: ``"op#input position"`` -> median elements over ranks (classify.work_size).
    input_sizes: dict[str, float] = field(default_factory=dict)
    #: HTA-compatible shares per rank (classify/gpu_metrics.py): ``rank``, ``gpu_idle_pct``,
    #: ``comm_comp_overlap_pct`` (percent; None where undefined); empty for CPU runs.
    gpu_metrics: FrameField = FrameField()  # noqa: RUF009 (a descriptor)
    #: Per execution and rank: (execution, rank, clock offset s to the execution's first rank,
    #: median scatter s of its aligned collective ends, None where it shares none); the offset
    #: is 0 where under 200 us (ranks of one host share a clock).
    clock_offsets: tuple[tuple[int, int, float, float | None], ...] = ()

    def mean_breakdown(self) -> dict[str, float]:
        """Mean seconds per step over ranks and steps, per category (sums to mean duration)."""
        steps = table_of(self, "steps")
        return {c: series_mean(steps.col(c)) for c in CATEGORIES}
