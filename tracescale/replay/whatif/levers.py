"""A fitted replay study + world sizes in -> what fixing each lever buys there, replayed.

Why replayed and not a category's share subtracted from the projected breakdown: a step is the
longest chain through threads, streams and waits. Removing data loading also removes the
waits of the other ranks for the rank whose loader stalled (attributed to sync or
communication); hiding a collective behind compute buys nothing where the compute stream
waits for it anyway; a host gap that overlaps device work costs nothing. Each lever is the
same graph edit a ``--what-if`` makes (:func:`tracescale.replay.whatif.scenario.scenario_study`),
replayed at each N, so a finding's gain and a what-if's projection are one model's answer.

Levers:

- each category in :data:`LEVER_CATEGORIES` removed (its nodes, and for communication the
  collective transfers, at zero; the per-rank delays its host pieces carry with it);
- ``arrival``: every rank arrives at each collective as the typical one does (the waits for
  the slowest rank, random and systematic, at zero): what steadier data loading and per-rank
  work would buy;
- ``pipeline_bubble``: in a pipeline-parallel job, the stage's point-to-point nodes keep only
  the per-microbatch part of their law (``b/N`` of ``a + b/N``, :mod:`tracescale.replay.laws.p2p`):
  the fill and drain gone, what more microbatches per step or an interleaved schedule buy;
- ``compute``: every compute kernel group's part that does not shrink (``a`` of its law
  ``a + b/N``) made parallel: its law becomes ``(a + b)/N``, equal at N=1, and its nodes at the
  largest measured N take that law's time there (a ratio-based law cannot move work from one
  term to the other by itself); strong scaling only (in weak scaling work per rank is meant to
  stay);
- ``straggler``: where the representative rank (the one the others wait for) computes slower
  than the median rank by :data:`STRAGGLER_MIN` or more, its kernels at the median rank's
  speed (the laws already divide that factor out; the graph keeps it).

Op levers (``ops``): a top op that does not shrink with N (its ``top_ops`` law flagged) is
replayed without its nodes, the law group of a kernel (``kernel:NAME``) or of the host gaps
inside an op (``gap:NAME``): what dropping, fusing or sharding that one op would buy. Collective
kernels have one law group for all of them (their time is the alpha-beta model's); the
communication lever speaks for them.

The gain is the ratio of the two replays' mean steps (same durations, same waits otherwise),
applied to the projection's own step, as for the CUDA-graph lever
(:mod:`tracescale.replay.whatif.cuda_graph_gain`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracescale.categories import CATEGORIES
from tracescale.replay.engine.schedule import replay
from tracescale.replay.graph.build import DEV
from tracescale.replay.laws.nodes import CONSTANT, parallel_law
from tracescale.replay.laws.p2p import p2p_rows
from tracescale.replay.project import ReplayStudy
from tracescale.replay.whatif.scenario import scenario_study

#: Categories whose removal is a lever (compute is parallelized, not removed; idle has no node).
LEVER_CATEGORIES = ("dataloader", "host", "sync", "reduction", "memcpy", "communication")
#: A lever whose replayed gain is below this is left out of the document (noise of the replay).
MIN_RECORDED_GAIN = 1.0005
#: The representative rank's compute over the median rank's from which it is a straggler.
STRAGGLER_MIN = 1.01

ASSUMPTION = (
    "each lever replayed as the graph edit of its what-if: the category's nodes (for "
    "communication the collective transfers) at zero, at every N; 'arrival': every rank "
    "arrives at each collective as the typical rank does (no wait for the slowest rank); "
    "'compute': each compute kernel's part that does not shrink made parallel (a + b/N -> "
    "(a + b)/N); 'straggler': the representative rank's kernels at the median rank's speed; "
    "'pipeline_bubble': the stage's send/recv time at its per-microbatch part (no fill, no drain)"
)


def _present(study: ReplayStudy, cat: str) -> bool:
    """Whether removing ``cat`` can change the replay: it has time in the graph (or, for
    communication, collective transfers)."""
    g = study.base.graph
    idx = CATEGORIES.index(cat)
    if cat == "communication" and len(study.base.coll):
        return True
    return bool(np.any(g.dur[g.category == idx] > 0))


def _mean(steps: np.ndarray) -> float:
    return float(np.mean(steps)) if len(steps) else 0.0


def _arrival_steps(study: ReplayStudy, n: int) -> np.ndarray:
    """The kept steps replayed at ``n`` with every wait for the slowest rank at zero."""
    dur, _pre, _var = study.split_durations(n)
    base = study.base
    out: np.ndarray = replay(base.graph, dur, np.zeros(len(dur))).step_time[base.kept]
    return out


def _without_bubble(study: ReplayStudy, n: int) -> ReplayStudy | None:
    """``study`` with its p2p nodes at the per-microbatch share of their law at ``n``."""
    law = study.p2p
    if law is None or law.form != "a+b/N" or len(law.coef) < 2:
        return None
    a, b = float(law.coef[0]), float(law.coef[1])
    if a <= 0 or a + b / n <= 0:
        return None
    base = study.base
    nodes = base.coll["node"].to_numpy()[p2p_rows(base.coll)]
    if not len(nodes):
        return None
    keep = (b / n) / (a + b / n)
    coll = base.coll.copy()
    rows = p2p_rows(coll)
    for col in ("transfer", "wait"):  # column writes: coll is a table.Table, not a frame
        values = np.asarray(coll[col], dtype=np.float64).copy()
        values[rows] = values[rows] * keep
        coll[col] = values
    dur = base.graph.dur.copy()
    dur[nodes] = np.round(dur[nodes] * keep).astype(np.int64)
    graph = dataclasses.replace(base.graph, dur=dur)
    new_base = dataclasses.replace(base, graph=graph, coll=coll)
    return dataclasses.replace(study, runs=(*study.runs[:-1], new_base))


def _compute_parallel(study: ReplayStudy) -> ReplayStudy | None:
    """``study`` with every compute kernel group's constant part parallel (see the module
    docstring); None when no compute group has one."""
    base = study.base
    g = base.graph
    ref = float(base.world_size)
    comp = (g.kind >= DEV) & (g.category == CATEGORIES.index("compute")) & (g.group >= 0)
    factor = np.ones(len(g.groups))
    laws = dict(study.laws)
    for k in np.unique(g.group[comp]).tolist():
        name = g.groups[k]
        law = study.laws.get(name)
        new = parallel_law(law) if law is not None and law is not CONSTANT else None
        if new is None or law is None or law.value(ref) <= 0:
            continue
        factor[k] = new.value(ref) / law.value(ref)
        laws[name] = new
    if np.all(factor == 1.0):
        return None
    dur = g.dur.copy()
    dur[comp] = np.round(dur[comp] * factor[g.group[comp]]).astype(np.int64)
    new_base = dataclasses.replace(base, graph=dataclasses.replace(g, dur=dur))
    return dataclasses.replace(study, runs=(*study.runs[:-1], new_base), laws=laws)


def _without_group(study: ReplayStudy, group: str) -> ReplayStudy | None:
    """``study`` with the nodes of law group ``group`` at zero (None: no such nodes)."""
    g = study.base.graph
    if group not in g.groups:
        return None
    nodes = (g.group == g.groups.index(group)) & (g.dur > 0)
    if not nodes.any():
        return None
    dur = np.where(nodes, 0, g.dur).astype(np.int64)
    base = study.base
    new_base = dataclasses.replace(
        base,
        graph=dataclasses.replace(g, dur=dur),
        delay_excess=np.where(
            (base.delay_node >= 0) & nodes[np.clip(base.delay_node, 0, None)],
            0.0,
            base.delay_excess,
        )
        if len(base.delay_node)
        else base.delay_excess,
    )
    return dataclasses.replace(study, runs=(*study.runs[:-1], new_base))


def op_group(category: str, name: str) -> str:
    """The law group of a ``top_ops`` name in ``category``: its kernels', or the host gaps'
    inside it (host categories)."""
    host = category in ("host", "dataloader", "sync", "reduction")
    return ("gap:" if host else "kernel:") + name


def lever_gains(
    study: ReplayStudy,
    sizes: Sequence[int],
    *,
    mode: str = "strong",
    ops: Sequence[str] = (),
) -> dict[str, Any]:
    """Per world size: each lever's replayed speedup and the projected step it leads to; per
    op group in ``ops`` (:func:`op_group`), the same without that op (``ops`` of a point)."""
    scenarios = {
        cat: scenario_study(study, {cat: 0.0}) for cat in LEVER_CATEGORIES if _present(study, cat)
    }
    parallel = _compute_parallel(study) if mode != "weak" else None
    if parallel is not None:
        scenarios["compute"] = parallel
    slow = study.base.device_factor
    if slow >= STRAGGLER_MIN:
        scenarios["straggler"] = scenario_study(study, {"compute": 1.0 / slow})
    without_op = {
        op: cut for op in dict.fromkeys(ops) if (cut := _without_group(study, op)) is not None
    }
    points = []
    for n in sorted({int(s) for s in sizes}):
        now = _mean(study.replayed_steps(n))
        if now <= 0:
            continue
        t = study.project(n).step_time_s
        edited = {cat: _mean(s.replayed_steps(n)) for cat, s in scenarios.items()}
        edited["arrival"] = _mean(_arrival_steps(study, n))
        bubble = _without_bubble(study, n)
        if bubble is not None:
            edited["pipeline_bubble"] = _mean(bubble.replayed_steps(n))
        levers = {
            name: {"speedup": now / after, "step_time_s": t * after / now}
            for name, after in edited.items()
            if after > 0 and now / after >= MIN_RECORDED_GAIN
        }
        op_steps = {op: _mean(s.replayed_steps(n)) for op, s in without_op.items()}
        point: dict[str, Any] = {"world_size": n, "step_time_s": t, "levers": levers}
        if without_op:
            point["ops"] = {
                op: {"speedup": now / after, "step_time_s": t * after / now}
                for op, after in op_steps.items()
                if after > 0
            }
        points.append(point)
    return {"points": points, "assumption": ASSUMPTION}
