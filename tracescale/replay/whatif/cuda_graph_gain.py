"""What a CUDA graph would buy: the fitted study with each step's launched work run from one
graph launch, replayed at the projected world sizes (the launch-bound lever's gain).

Why a graph transformation and not "host time removed": under a graph the host issues one
``cudaGraphLaunch`` per step and the device runs the captured kernels back to back, a small
device gap apart. What that buys depends on the step's chain: a launch-bound step (the GPU
waits for launches) gains the launch time, a compute-bound one almost nothing, and the
device gaps between many short kernels are a serial term that stays. The transformation:

- the host pieces a graph replaces inside a step (kernel launch calls and the op time
  between two of them on one thread) take no time, except that the first of them
  in each step takes one graph launch's host cost: the median measured graph launch call
  where the trace holds one, else :data:`GRAPH_LAUNCH_NS`;
- every device node launched from the host starts a graph gap after what gates it (the
  median measured gap between graph nodes where the trace has graphs, else
  :data:`GRAPH_GAP_NS`) instead of its launch latency; graph nodes already measured keep
  theirs.

Data loading, sync calls, host collectives and the device work keep their laws: a graph
captures launches, not the input pipeline or the host's waits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tracescale.replay.graph.build import CALL, DEV, GAP, Graph
from tracescale.replay.graph.cuda_graphs import GRAPH_LAUNCH_CALLS
from tracescale.replay.project import ReplayStudy

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
BOOL = npt.NDArray[np.bool_]

#: Per-kernel launch calls, the host work a graph launch replaces.
KERNEL_LAUNCH_CALLS = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchCooperativeKernel",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "hipLaunchKernel",
        "hipExtLaunchKernel",
        "hipModuleLaunchKernel",
        "hipExtModuleLaunchKernel",
    }
)
#: Host cost of one graph launch when the trace measured none (hundreds of nodes: tens of us).
GRAPH_LAUNCH_NS = 20_000
#: Device gap between graph nodes when the trace measured none.
GRAPH_GAP_NS = 2_000


def graph_captured(study: ReplayStudy) -> tuple[ReplayStudy, int, int]:
    """``study`` with the base run's graph transformed as the module docstring says; returns
    it with the graph launch cost and graph gap used (ns)."""
    base = study.base
    g = base.graph
    n = len(g)
    is_call = g.kind == CALL
    graph_groups = [i for i, k in enumerate(g.groups) if _call_name(k) in GRAPH_LAUNCH_CALLS]
    launch_call = is_call & np.isin(g.group, graph_groups)
    cost = int(np.median(g.dur[launch_call])) if launch_call.any() else GRAPH_LAUNCH_NS
    dev = g.kind >= DEV
    dep = np.clip(g.dep, 0, None)
    from_host = dev & (g.dep >= 0) & (g.kind[dep] < DEV)
    after_node = dev & (g.dep >= 0) & (g.kind[dep] >= DEV)
    gap = int(np.median(g.lag[after_node])) if after_node.any() else GRAPH_GAP_NS
    captured = _captured_host(g, is_call)
    dur = np.where(captured, 0, g.dur).astype(np.int64)
    idx = np.flatnonzero(captured)
    if len(idx):
        step = g.step[idx].astype(np.int64)
        o = np.lexsort((idx, g.start[idx], step))
        first = idx[o][np.r_[True, step[o][1:] != step[o][:-1]]]
        dur[first] = cost
    dep_new, lag, dep2 = _chained(g, from_host & captured[dep], gap)
    graph = dataclasses.replace(g, dur=dur, lag=lag, dep=dep_new, dep2=dep2)
    new_base = dataclasses.replace(base, graph=graph)
    if len(base.delay_node):
        keep = np.ones(n)
        keep[captured] = 0.0
        new_base = dataclasses.replace(
            new_base, delay_excess=base.delay_excess * keep[base.delay_node]
        )
    out = dataclasses.replace(study, runs=(*study.runs[:-1], new_base))
    return out, cost, gap


def _chained(g: Graph, launched: BOOL, gap: int) -> tuple[I32, I64, I32]:
    """``launched`` device nodes (launched from a captured host piece) as graph nodes: each
    follows the device node before it on its stream, ``gap`` later, and its launching host
    piece becomes its second dependency (what it waited for on the host, e.g. the data,
    still gates it) unless a cross-stream wait holds that slot (then it keeps its launch
    edge, ``gap`` after it)."""
    dep = g.dep.copy()
    dep2 = g.dep2.copy()
    lag = g.lag.copy()
    dev = np.flatnonzero(g.kind >= DEV)
    dev = dev[np.lexsort((dev, g.start[dev], g.res[dev]))]
    prev = np.full(len(g), -1, dtype=np.int64)
    same = g.res[dev][1:] == g.res[dev][:-1]
    prev[dev[1:][same]] = dev[:-1][same]
    chain = launched & (prev >= 0) & (g.dep2 < 0)
    dep2[chain] = g.dep[chain]
    dep[chain] = prev[chain]
    lag[launched] = np.minimum(g.lag[launched], gap)
    lag[chain] = gap
    return dep.astype(g.dep.dtype), lag.astype(np.int64), dep2.astype(g.dep2.dtype)


def _captured_host(g: Graph, is_call: BOOL) -> BOOL:
    """The host pieces a graph replaces, inside steps: kernel launch calls, and the op time
    between two of them on one thread (gap pieces whose nearest calls both launch). Time before
    or after other calls (data loading, copies of the batch, syncs) is not launch work."""
    launch_groups = [i for i, k in enumerate(g.groups) if _call_name(k) in KERNEL_LAUNCH_CALLS]
    launch = is_call & np.isin(g.group, launch_groups)
    n = len(g)
    at = np.arange(n)
    # Per node: the nearest host piece that is not a gap before and after it (its thread's).
    solid = (g.kind < DEV) & (g.kind != GAP)
    prev = np.maximum.accumulate(np.where(solid, at, -1))
    nxt = np.minimum.accumulate(np.where(solid, at, n)[::-1])[::-1]
    pc, nc = np.clip(prev, 0, n - 1), np.clip(nxt, 0, n - 1)
    gap = g.kind == GAP
    between = gap & (prev >= 0) & (nxt < n) & launch[pc] & launch[nc]
    between &= (g.res[pc] == g.res) & (g.res[nc] == g.res)
    out: BOOL = (launch | between) & (g.step >= 0)
    return out


def _call_name(group: str) -> str:
    return group[5:] if group.startswith("call:") else ""


def graph_capture_gain(study: ReplayStudy, sizes: Sequence[int]) -> dict[str, Any]:
    """Per world size: the step replayed as measured and with its launches captured in one
    graph per step (:func:`graph_captured`), and the speedup that buys. The ratio of the two
    replays (same durations, same waits) scales the projected step, so the graph step is
    the projection's own step times what the graph saves."""
    captured, cost, gap = graph_captured(study)
    points = []
    # a run attributed as CPU work (no device work in its steps) has nothing a graph captures
    gpu = study.base.kind == "gpu"
    for n in sorted(set(int(s) for s in sizes)) if gpu else []:
        now = float(np.mean(study.replayed_steps(n)))
        graphed = float(np.mean(captured.replayed_steps(n)))
        if now <= 0 or graphed <= 0:
            continue
        t = study.project(n).step_time_s
        points.append(
            {
                "world_size": n,
                "step_time_s": t,
                "graph_step_time_s": t * graphed / now,
                "speedup": now / graphed,
            }
        )
    return {
        "graph_launch_s": cost / 1e9,
        "graph_gap_s": gap / 1e9,
        "points": points,
        "assumption": "kernel launch calls and the op time between two of them replaced by "
        "one graph launch per step; each kernel launched from "
        "the host starts a graph gap after what gates it instead of its launch latency",
    }
