"""A fitted replay study of several runs + ``--assume CATEGORY=serial|parallel`` -> the same
study with that category's work following the stated law instead of the fitted one.

Why: the laws are measured, but a user who knows better (the optimizer will be sharded, the
loss's ``.item()`` will move out of the loop, the loader runs on one rank only) states how a
category's work scales, and wants the projection and the serial fraction of that job, from
the same replay as every other number, not from a second model. The edit is a law edit on
the category's nodes (host gaps and kernels, :func:`.scenario.node_categories`,
so host time after a sync returns is sync as classify says), each node moved into a law group
of its own kind (``assumed:<group>``) so the group's other nodes keep the fitted law:

- ``parallel``: the law's part that does not shrink made parallel, ``a + b/N -> (a + b)/N``
  (``a -> a/N``);
- ``serial``: the law's time at one rank at every N, ``a + b/N -> a + b``.

Both keep T(1); the nodes at the largest measured N take the new law's time there (the laws
are ratios to it). Runtime calls, launches and sync calls keep their measured time as in every
replay; collective transfers follow their link model and idle time has no node of its own:
those statements are not applied, and the study says so. Weak scaling keeps each rank's work
by definition: nothing is applied there either.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from tracescale.categories import CATEGORIES
from tracescale.replay.graph.build import DEV, GAP
from tracescale.replay.laws.nodes import CONSTANT, Law, parallel_law
from tracescale.replay.project import ReplayStudy
from tracescale.replay.whatif.scenario import node_categories

#: Categories with no node a law drives: their statements are reported as not applied.
NOT_APPLICABLE = {
    "communication": "collective transfers follow their link model, not a fitted law",
    "idle": "idle time has no node of its own in the execution graph",
}


def _serial_law(law: Law) -> Law:
    return Law("a", (law.value(1.0),), "a", (law.value(1.0, alt=True),), 0.0)


def _edited(law: Law, kind: str) -> Law | None:
    if law is CONSTANT or law.value(1.0) <= 0:
        return None
    return parallel_law(law) if kind == "parallel" else _serial_law(law)


def assumed_laws(
    study: ReplayStudy, mode: str, assumptions: Mapping[str, str]
) -> tuple[ReplayStudy, list[str], list[str]]:
    """``study`` with each stated category's nodes under the stated law; what each applied
    statement moved (an assumption of the projection), and why the others were not applied
    (warnings)."""
    applied: list[str] = []
    notes: list[str] = []
    if mode != "strong":
        if assumptions:
            notes.append(
                "--assume is not applied to a weak-scaling study of several runs: each "
                "rank's work is measured to stay, so no category is made serial or parallel"
            )
        return study, applied, notes
    base = study.base
    g = base.graph
    ref = float(base.world_size)
    cats = node_categories(g)
    driven = np.isin(g.kind, [GAP, DEV]) & (g.group >= 0)
    groups = list(g.groups)
    group = g.group.copy()
    dur = g.dur.astype(np.float64)
    laws = dict(study.laws)
    group_time = dict(base.group_time)
    for cat, kind in sorted(assumptions.items()):
        if cat in NOT_APPLICABLE:
            notes.append(f"--assume {cat}={kind} is not applied: {NOT_APPLICABLE[cat]}")
            continue
        on = driven & (cats == CATEGORIES.index(cat))
        moved = 0.0
        for k in np.unique(g.group[on]).tolist():
            name = groups[k]
            old = laws.get(name, CONSTANT)
            new = _edited(old, kind)
            if new is None:
                continue
            nodes = on & (g.group == k)
            factor = new.value(ref) / old.value(ref) if old.value(ref) > 0 else 1.0
            share = float(g.dur[nodes].sum()) / max(
                float(g.dur[driven & (g.group == k)].sum()), 1.0
            )
            dur[nodes] *= factor
            group[nodes] = len(groups)
            groups.append(f"assumed:{name}")
            laws[groups[-1]] = new
            t = group_time.get(name, 0.0)
            group_time[groups[-1]] = t * share * factor
            group_time[name] = t * (1.0 - share)
            moved += t * share
        applied.append(
            f"--assume {cat}={kind}: {moved * 1e3:.3g} ms per step of {cat} work at N="
            f"{base.world_size} follows "
            + ("(a + b)/N (its part that does not shrink made parallel)" if kind == "parallel"
               else "a + b (its time at one rank, at every N)")
        )  # fmt: skip
    graph = dataclasses.replace(
        g, dur=np.round(dur).astype(g.dur.dtype), group=group, groups=tuple(groups)
    )
    new_base = dataclasses.replace(base, graph=graph, group_time=group_time)
    new_study = dataclasses.replace(study, runs=(*study.runs[:-1], new_base), laws=laws)
    return new_study, applied, notes
