"""One run's replay: the representative rank's graph, its replayed steps and the tables the
projection fits on (time per node group, collective instances, arrival offsets)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tracescale.categories import CATEGORIES
from tracescale.classify.rank import classify_rank
from tracescale.classify.result import RunBreakdown
from tracescale.classify.rules import RuleSet
from tracescale.groups import group_codes, group_mean, group_sum
from tracescale.ingest.decode import DEFAULT_MEMORY_BUDGET, load_trace
from tracescale.ingest.execution_trace import (
    EtDependencies,
    ExecutionTraceError,
    read_dependencies,
)
from tracescale.ingest.last_read import found_for, take
from tracescale.ingest.plausible import vet
from tracescale.ingest.steps import find_steps
from tracescale.ingest.trace import RankTrace
from tracescale.memory import return_freed_memory
from tracescale.parallel.tasks import local_copy
from tracescale.replay.arrivals import variability
from tracescale.replay.arrivals.accumulation import accumulated_rows
from tracescale.replay.arrivals.variability import OffsetPool, own_delays
from tracescale.replay.engine.coll_table import replay_collectives
from tracescale.replay.engine.cycles import StepMix, step_mix, step_signature
from tracescale.replay.engine.graph_cache import GraphInput, cached_graph_input
from tracescale.replay.engine.schedule import replay
from tracescale.replay.graph.build import DCOLL, DEV, GAP, HCOLL, Graph, build_graph
from tracescale.replay.laws.kernel_pools import KernelTables, kernel_tables
from tracescale.replay.serial_parts import step_categories
from tracescale.replay.waits.backward_thread import backward_thread_edges
from tracescale.replay.waits.et_edges import et_edges
from tracescale.replay.waits.host_collectives import host_collective_edges
from tracescale.table import Table, as_table, table_of

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class RunReplay:
    """``measured``/``replayed``: seconds per step of the representative ``rank``;
    ``group_time``: seconds per step per law group; ``coll``: one row per collective node
    (node, collective, pg, algo, bytes, group, transfer, wait, position, and the rank's arrival
    offset with its systematic/host/rest parts); ``offsets``: arrival
    offset pools (seconds, relative to the instance's mean arrival) per position in the step."""

    world_size: int
    rank: int
    kind: str
    graph: Graph
    measured: F64
    replayed: F64
    group_time: dict[str, float]
    coll: Table
    offsets: dict[int, OffsetPool]
    devices: int = 0  # length of deviceProperties in the rank's trace
    #: The representative rank's own compute over the median rank's: a slow rank stays slow
    #: by this factor, so laws are fitted on kernel times divided by it.
    device_factor: float = 1.0
    #: Every rank's own host delay per step, centred (``variability.own_delays``), summed per
    #: accumulation cycle (``cycle``): pooled over the runs for the slowest of N ranks.
    delays: F64 = field(default_factory=lambda: np.zeros(0))
    #: How many steps one of ``delays`` sums: with gradient accumulation, the steps since a
    #: rank's last collective (``arrivals.accumulation``); 1 where every step holds one.
    cycle: int = 1
    #: Per step: the representative rank's gaps where its own host delay shows (``_delay_gaps``)
    #: and their shares of how much longer that step's delay was than its run's median
    #: (seconds, may be negative). A projection replays the rank with a typical delay and adds
    #: the slowest of N ranks' lateness, so the slowest rank of the measured run is not counted
    #: twice.
    delay_node: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    delay_excess: F64 = field(default_factory=lambda: np.zeros(0))
    #: Each delay node's share of its step's delay (1 where one gap holds it; they sum to 1
    #: per step): the mean delay kept at infinite N is spread as the excess is.
    delay_share: F64 = field(default_factory=lambda: np.zeros(0))
    #: Kernel counts and times per launching op per step (names that vary with N are fitted
    #: per launching op: ``replay.laws.kernel_pools``).
    kernels: KernelTables = field(default_factory=lambda: KernelTables({}, {}))
    #: Per category (``CATEGORIES`` order): seconds per step of the rank's waits the measured
    #: attribution gave to the late rank's category (cross-rank cause); the waits kept in the
    #: step at infinite N take these categories (``ReplayStudy.serial_parts``).
    caused: F64 = field(default_factory=lambda: np.zeros(len(CATEGORIES)))
    #: Main-thread waits for a host-side (gloo) collective inferred
    #: (``replay.waits.host_collectives``).
    host_waits: int = 0
    #: Main-thread waits for the autograd engine's backward thread inferred
    #: (``replay.waits.backward_thread``).
    backward_waits: int = 0

    @property
    def kept(self) -> npt.NDArray[np.bool_]:
        """Steps the analysis kept (``--steps``): the ones with a measured time."""
        return np.isfinite(self.measured)

    @functools.cached_property
    def mix(self) -> StepMix:
        """How the kept steps enter a mean (``replay.engine.cycles.step_mix``), worked out once."""
        return step_mix(step_signature(self.graph, self.kept))

    @property
    def weights(self) -> F64:
        """Per kept step, its weight in the mean step (``replay.engine.cycles``)."""
        return self.mix.weights

    @property
    def strata(self) -> npt.NDArray[np.int64] | None:
        """Per kept step, its kind for the bootstrap where the kinds follow a cycle
        (``replay.engine.cycles.StepMix.strata``); None otherwise."""
        return self.mix.strata

    @property
    def mix_weights(self) -> tuple[F64, ...]:
        """Alternative weights for the interval's ends where the step mix was estimated
        (``replay.engine.cycles.StepMix.ends``); none otherwise."""
        return self.mix.ends

    @property
    def replay_error(self) -> float:
        """Mean absolute relative error of replayed vs measured step time."""
        ok = self.measured > 0
        if not ok.any():
            return 0.0
        return float(np.mean(np.abs(self.replayed[ok] - self.measured[ok]) / self.measured[ok]))


def representative_rank(run: RunBreakdown) -> int:
    """The rank that waits least in collectives: the one the others wait for (critical)."""
    coll = table_of(run, "collectives")
    if len(coll) == 0:
        return int(run.ranks[0])
    codes, (ranks,) = group_codes(coll.col("rank"))
    waits = group_sum(codes, coll.col("wait"), len(ranks))
    return int(ranks[int(np.argmin(waits))])  # the first of equal ones, as idxmin


def _dependencies(path: str) -> EtDependencies | None:
    """The paired ET's dependencies; None without one or where it no longer reads (discovery
    read it and warned already)."""
    if not path:
        return None
    try:
        return read_dependencies(path)
    except ExecutionTraceError:
        return None


def replay_run(
    run: RunBreakdown,
    path: str,
    rank: int,
    rules: RuleSet,
    *,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    steps: slice | None = None,
    cache_dir: str | None = None,
    use_cache: bool = False,
    own_steps: Any = None,
    loader: Callable[[str], RankTrace] | None = None,
    execution_trace: str = "",
) -> RunReplay:
    """Build and replay ``rank``'s graph (its trace file ``path`` is read once more, unless
    ``use_cache`` finds the graph under ``cache_dir``, the per-rank results' cache).

    ``steps`` is the selection already applied to ``run``; steps it left out have no measured
    time and are replayed (their work precedes the kept ones) but neither fitted nor projected.
    ``own_steps``: the step rows (``step``, ``duration``) of ``path`` itself. Pass them when the
    run pools repeats (several folders of one world size): the run's rows of ``rank`` then come
    from several files whose step numbers overlap, and the replay must be compared with its own.
    ``loader``: ``path`` -> the rank's trace, where no file holds it (HTA's loaded frames); it is
    neither read from disk nor cached then. ``execution_trace``: the PyTorch execution trace
    paired with ``path`` ("" none), whose cross-thread data dependencies become edges
    (``replay.waits.et_edges``).
    """
    del steps  # the run's rows already carry the selection
    run_steps = table_of(run, "steps")
    rank_rows = run_steps[run_steps.col("rank") == rank]
    rows = rank_rows if own_steps is None else as_table(own_steps)

    def build() -> GraphInput:
        key = (path, rank, rules.digest, memory_budget)
        kept = None if loader is not None else take(key)
        return_freed_memory()  # what the map step freed, before a second trace is decoded
        if kept is not None:  # the map step's last trace, read in this process
            trace, coll = kept
        else:
            if loader is not None:
                trace = vet(loader(path))
            else:
                with local_copy(path) as local:  # a URL (s3://, memory://) is read as the map
                    # vetted as the map step vets it: an implausible event it dropped (a kernel
                    # of days) must not become a node that the replayed step waits for
                    trace = vet(load_trace(local, memory_budget=memory_budget))
            # Only the collective instances are kept: the rest of the rank's classification
            # is freed before the graph is built beside the trace (the stage's memory peak).
            # The map step's own classification of this file found them already.
            coll = None if loader is not None else found_for(key)
            if coll is None:
                coll = table_of(classify_rank(trace, rules, rank=rank), "collectives")
        devices = len(trace.meta.device_names)
        return_freed_memory()  # the decoder's and classification's buffers
        et = _dependencies(execution_trace)
        graph = build_graph(trace, find_steps(trace, rules.step_marker), coll, rules, et)
        del trace
        return GraphInput(graph, coll, devices)

    if use_cache and loader is None:
        item = cached_graph_input(
            cache_dir, path, rank, rules.digest, memory_budget, build, execution_trace
        )
    else:
        item = build()
    graph, host_waits = item.graph, 0
    if run.kind == "cpu":  # gloo: the runloop threads' collectives tied to the main thread
        graph, host_waits = host_collective_edges(graph)
    # the autograd engine's backward thread: handed over by, and waited for by, the main thread
    graph, backward_waits = backward_thread_edges(graph)
    graph, _ = et_edges(graph)  # the ET's cross-thread data dependencies (graph.et_waits)
    rep = replay(graph)
    replayed = rep.step_time
    by_step = dict(
        zip(rows["step"].astype(int).tolist(), rows.col("duration").tolist(), strict=True)
    )
    measured = np.array([by_step.get(int(s), np.nan) for s in graph.step_numbers.tolist()])
    keep = np.isfinite(measured)
    caused = _caused(rank_rows, step_categories(graph, rep)[keep])
    graph_steps = (graph.step >= 0) & keep[np.clip(graph.step, 0, None)]
    nsteps = max(int(keep.sum()), 1)
    group_time: dict[str, float] = {}
    sel = graph_steps & np.isin(graph.kind, [GAP, DEV])
    sums = np.bincount(graph.group[sel], weights=graph.dur[sel] / 1e9, minlength=len(graph.groups))
    for g, name in enumerate(graph.groups):
        if sums[g] > 0:
            group_time[name] = float(sums[g]) / nsteps
    kernels = kernel_tables(graph, graph_steps, nsteps)
    delays = own_delays(run)
    # what the slowest-rank model draws: summed over each accumulation cycle
    draws, cycle = accumulated_rows(delays, table_of(run, "collectives"))
    # Looked up on the module at call time, so a wrapper put there (a test's spy) is seen
    # whichever of the two modules was imported first.
    all_c, pools = variability.arrival_offsets(run, rank)
    delay_node, delay_excess, delay_share = _delay_gaps(graph, keep, delays, rank)
    for node, ex in zip(delay_node.tolist(), delay_excess.tolist(), strict=True):
        name = graph.groups[int(graph.group[node])]
        if name in group_time:  # the laws see the rank's work at a typical delay
            group_time[name] = max(group_time[name] - ex / nsteps, 0.0)
    mine = all_c[all_c.col("rank") == rank] if len(all_c) else all_c
    coll = replay_collectives(as_table(graph.collectives), as_table(item.collectives), mine, graph)
    return RunReplay(
        world_size=run.world_size,
        rank=rank,
        kind=run.kind,
        graph=graph,
        measured=measured,
        replayed=replayed,
        group_time=group_time,
        coll=coll,
        offsets=pools,
        devices=item.devices,
        device_factor=_device_factor(run, rank),
        delays=draws.col("delay").astype(np.float64),
        cycle=cycle,
        delay_node=delay_node,
        delay_excess=delay_excess,
        delay_share=delay_share,
        kernels=kernels,
        caused=caused,
        host_waits=host_waits,
        backward_waits=backward_waits,
    )


def _caused(rows: Table, own: F64) -> F64:
    """Seconds per step per category the measured attribution gave the rank's waits for late
    ranks (cross-rank cause): its breakdown less its own replayed timeline's, communication
    left out (a wait no cause claimed stays communication)."""
    cols = [c for c in CATEGORIES if c in rows]
    if len(rows) == 0 or len(own) == 0 or len(cols) < len(CATEGORIES):
        return np.zeros(len(CATEGORIES))
    values = np.stack([rows.col(c).astype(np.float64) for c in cols], axis=1)
    out = np.clip(values.mean(axis=0) - own.mean(axis=0), 0, None)
    out[CATEGORIES.index("communication")] = 0.0
    return np.asarray(out, dtype=np.float64)


#: A gap at least this share of its step's longest gap, of the same category, shares the
#: step's delay: a loader's annotation cut by its child ops into several gaps holds the delay
#: across them, and a law fitted per gap group needs each gap back at its typical length.
DELAY_GAP_SHARE = 0.1


def _delay_gaps(
    graph: Graph, keep: npt.NDArray[np.bool_], delays: Table, rank: int
) -> tuple[npt.NDArray[np.int64], F64, F64]:
    """Per kept step: the gaps where the rank's own host delay shows (its longest host gap and
    the step's other gaps of that category at least ``DELAY_GAP_SHARE`` of it), the step's own
    delay beyond the run's median spread over them in proportion to their lengths (at most
    their sum), and each gap's share of the step's delay (they sum to 1 per step)."""
    none = np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
    if len(delays) == 0 or rank not in delays.col("rank").tolist():
        return none
    mine = delays[delays.col("rank") == rank]
    mine_step = {int(s): i for i, s in enumerate(mine.col("step").tolist())}
    gaps = np.flatnonzero((graph.kind == GAP) & (graph.step >= 0))
    # The longest gap of each step (the first of equal ones): one sort over the gap nodes,
    # not a scan of every node per step.
    idx = gaps[np.lexsort((gaps, -graph.dur[gaps], graph.step[gaps]))]
    step = graph.step[idx].astype(np.int64)
    first = np.ones(len(idx), dtype=np.bool_)
    first[1:] = step[1:] != step[:-1]
    longest = np.full(len(graph.step_first), -1, dtype=np.int64)
    longest[step[first]] = idx[first]
    s = graph.step[gaps].astype(np.int64)
    top = longest[s]
    cat = graph.category if len(graph.category) == len(graph) else np.zeros(len(graph))
    pick = (top >= 0) & (cat[gaps] == cat[np.clip(top, 0, None)])
    pick &= graph.dur[gaps] >= DELAY_GAP_SHARE * graph.dur[np.clip(top, 0, None)]
    pick &= graph.dur[gaps] > 0
    nodes, s = gaps[pick].astype(np.int64), s[pick]
    at = np.array([mine_step.get(int(x), -1) for x in graph.step_numbers[s].tolist()], np.int64)
    ok = keep[s] & (at >= 0)
    nodes, s, at = nodes[ok], s[ok], at[ok]
    if len(nodes) == 0:
        return none
    dur = graph.dur[nodes] / 1e9
    total = np.bincount(s, weights=dur, minlength=len(graph.step_first))[s]
    share = dur / total
    own = mine.col("delay").astype(np.float64)[at]
    excess = np.minimum(own, total) * share
    return nodes, excess.astype(np.float64), share.astype(np.float64)


#: glibc's mallopt parameter for the mmap threshold, and the threshold set (1 MiB).


def _device_factor(run: RunBreakdown, rank: int) -> float:
    st = table_of(run, "steps")
    codes, (ranks,) = group_codes(st.col("rank"))
    own = group_mean(codes, st.col("compute") - st.col("caused_compute"), len(ranks))
    med = float(np.median(own))
    if rank not in ranks.tolist() or med <= 0:
        return 1.0
    return max(float(own[ranks.tolist().index(rank)]) / med, 1e-3)


__all__ = ["DCOLL", "HCOLL", "RunReplay", "replay_run", "representative_rank"]
