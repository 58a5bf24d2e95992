"""A fitted replay study + what-if factors per category -> the same study with those nodes
rescaled, replayed like the projections (Daydream's what-if by graph transformation).

Why not scale the per-category closed form: a step is the longest chain through threads,
streams and waits, so halving communication that hides behind compute gains nothing, and
freeing the data loader also removes the rank-to-rank waits its per-rank delays caused (those
waits are attributed to sync or communication, not to data loading). The transformation:

- every node in a scaled category (``Graph.category``) runs ``factor`` times as long, at every
  N (the laws are ratios, so a node's law is unchanged);
- collective transfers scale with ``communication`` (a pipeline's send/recv nodes do not:
  they hold its wait for the other stages, the pipeline bubble's lever); the waits for the
  slowest rank follow the per-rank host delays, which scale with the category of the host
  pieces they show in (data loading for a loader's delays, host for host work);
- ``sync`` scales the time classify calls sync: the sync calls' own time and return latency
  (their wait for the device is the device's time and stays), and the main thread's host
  pieces after a sync returns until the next launch (classify: host time after a sync's
  return until the next GPU activity); ``sync=0`` also makes a blocking copy (an asynchronous
  copy of pageable memory, ``classify.blocking``) asynchronous: it no longer waits for the
  device, as with pinned memory and ``non_blocking=True``;
- ``idle`` (time with nothing running) has no node of its own: that scenario is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from tracescale.categories import CATEGORIES
from tracescale.classify.blocking import ASYNC_COPY
from tracescale.replay.graph.build import DEV, GAP, SYNC, Graph
from tracescale.replay.laws.p2p import p2p_rows
from tracescale.replay.project import ReplayStudy
from tracescale.replay.uncertainty.delays import DelayModel
from tracescale.replay.uncertainty.tail_fit import GPTail

#: Categories whose nodes a factor rescales directly.
SCALED = frozenset(
    {"compute", "memcpy", "communication", "dataloader", "reduction", "host", "sync"}
)


def unreplayable(factors: Mapping[str, float]) -> str | None:
    """Why the replay cannot transform the graph for ``factors`` (None: it can)."""
    for cat, f in factors.items():
        if cat in SCALED or f == 1.0:
            continue
        return f"{cat} time has no node of its own in the execution graph"
    return None


def node_categories(g: Graph) -> np.ndarray:
    """``Graph.category`` with the main thread's host pieces after a sync returns, until the
    next launch, as sync (classify's rule for host time after a sync's return)."""
    cat = g.category.astype(np.int64)
    if len(g) == 0 or len(g.step_first) == 0 or g.step_first[0] < 0:
        return cat
    launch = np.zeros(len(g), dtype=np.bool_)
    deps = g.dep[g.kind >= DEV]
    launch[deps[deps >= 0]] = True
    main = np.flatnonzero(g.res == g.res[g.step_first[0]])
    main = main[np.argsort(g.start[main], kind="stable")]
    is_sync = g.kind[main] == SYNC
    resets = is_sync | launch[main]
    # per main-thread node: the last sync or launch before it, and whether it was a sync
    at = np.where(resets, np.arange(len(main)), -1)
    last = np.maximum.accumulate(np.concatenate([[-1], at[:-1]]))
    after_sync = (last >= 0) & is_sync[np.clip(last, 0, None)]
    host = CATEGORIES.index("host")
    untraced = (cat[main] == host) | (cat[main] == CATEGORIES.index("idle"))
    mark = after_sync & ~resets & (g.kind[main] == GAP) & untraced
    cat[main[mark]] = CATEGORIES.index("sync")
    return cat


def _blocking_copy_nodes(g: Graph) -> npt.NDArray[np.bool_]:
    """Nodes of asynchronous copy calls (their law group ``call:cudaMemcpyAsync``...): a sync
    node among them blocks only because its host memory is pageable."""
    copy_group = np.array(
        [k.startswith("call:") and ASYNC_COPY.search(k[5:]) is not None for k in g.groups],
        dtype=np.bool_,
    )
    if not len(copy_group):
        return np.zeros(len(g), dtype=np.bool_)
    out: npt.NDArray[np.bool_] = (g.group >= 0) & copy_group[np.clip(g.group, 0, None)]
    return out


def _scaled_tail(t: GPTail | None, f: float) -> GPTail | None:
    return None if t is None else dataclasses.replace(t, u=t.u * f, scale=t.scale * f)


def _scaled_delays(delays: DelayModel | None, f: float) -> DelayModel | None:
    """Every draw ``f`` times as long (the tail's threshold and scale with it, its shape not)."""
    if delays is None or f == 1.0:
        return delays
    if f == 0.0:
        return DelayModel(np.zeros(len(delays.draws)), None)
    return dataclasses.replace(
        delays,
        draws=delays.draws * f,
        tail=_scaled_tail(delays.tail, f),
        refits=tuple(_scaled_tail(t, f) for t in delays.refits),
        alternatives=tuple(t for t in (_scaled_tail(a, f) for a in delays.alternatives) if t),
    )


def _delay_factor(study: ReplayStudy, per_category: np.ndarray) -> float:
    """The factor of the category the representative rank's per-step delays show in (the
    category holding most of its delay excess; data loading for a loader's delays)."""
    base = study.base
    if not len(base.delay_node):
        return 1.0
    cats = base.graph.category[base.delay_node].astype(np.int64)
    weight = np.bincount(cats + 1, weights=np.abs(base.delay_excess) + 1e-12)
    return float(per_category[int(np.argmax(weight))])


def scenario_study(study: ReplayStudy, factors: Mapping[str, float]) -> ReplayStudy:
    """``study`` with the base run's graph transformed by ``factors`` (category -> factor);
    check :func:`unreplayable` first."""
    base = study.base
    g = base.graph
    per_category = np.ones(len(CATEGORIES) + 1)  # index category + 1: -1 (none) keeps 1
    for cat, f in factors.items():
        if cat in SCALED:
            per_category[CATEGORIES.index(cat) + 1] = f
    # host time after a sync returns is sync, as classify has it: a host factor leaves it
    rescaled = {c for c, f in factors.items() if f != 1.0}
    cats = node_categories(g) if rescaled & {"sync", "host"} else g.category
    f_node = per_category[cats.astype(np.int64) + 1]
    # a pipeline's send/recv nodes are its dependency on the other stages (fill, drain, the
    # neighbours' compute), not a transfer a communication factor could shrink: kept
    p2p = p2p_rows(base.coll)
    f_node[base.coll["node"].to_numpy()[p2p]] = 1.0
    dur = np.round(g.dur * f_node).astype(np.int64)
    # a sync call's own time and return latency scale; its wait for the device does not
    is_sync = g.kind == SYNC
    fixed = np.where(is_sync, np.round(g.fixed * f_node), g.fixed).astype(np.int64)
    tail = np.where(is_sync, np.round(g.tail * f_node), g.tail).astype(np.int64)
    dep2 = g.dep2
    if factors.get("sync", 1.0) == 0.0:  # a blocking copy made asynchronous: no wait at all
        copies = is_sync & _blocking_copy_nodes(g)
        dep2 = np.where(copies, -1, g.dep2).astype(g.dep2.dtype)
        dur = np.where(copies, fixed, dur)
    coll = base.coll.copy()
    f_comm = float(factors.get("communication", 1.0))
    coll["transfer"] = np.where(p2p, coll["transfer"], coll["transfer"] * f_comm)
    new_base = dataclasses.replace(
        base,
        graph=dataclasses.replace(g, dur=dur, fixed=fixed, tail=tail, dep2=dep2),
        coll=coll,
        delay_excess=base.delay_excess * f_node[base.delay_node],
    )
    return dataclasses.replace(
        study,
        runs=(*study.runs[:-1], new_base),
        delays=_scaled_delays(study.delays, _delay_factor(study, per_category)),
    )
