"""A single run's replay: each node group's law from the assumption for its category
(``--assume CATEGORY=serial|parallel`` over the defaults), not from a fit across N.

Why: one world size fits no law (every group reads as a constant), yet the closed form's
single-run projection rests on stated assumptions; the replay takes the same assumptions and
applies them where they act, to the graph's nodes, so overlap and waits come out of the
replay. A group's category is the one holding most of its nodes' measured time
(``Graph.category``): a serial group keeps its time (``a``), a parallel one shrinks as ``b/N``
(strong scaling; weak scaling keeps every group's time per rank).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from tracescale.categories import CATEGORIES
from tracescale.replay.laws.nodes import Law
from tracescale.replay.project import ReplayStudy
from tracescale.scaling.fit import single_run_form


def group_categories(study: ReplayStudy) -> dict[str, str]:
    """Per law group of the base run: the category holding most of its measured time."""
    g = study.base.graph
    ok = g.category >= 0
    k = len(CATEGORIES)
    weight = np.bincount(
        g.group[ok].astype(np.int64) * k + g.category[ok].astype(np.int64),
        weights=g.dur[ok].astype(np.float64) + 1.0,
        minlength=len(g.groups) * k,
    ).reshape(len(g.groups), k)
    return {
        name: CATEGORIES[int(np.argmax(weight[i]))]
        for i, name in enumerate(g.groups)
        if weight[i].sum() > 0
    }


def assumed_study(study: ReplayStudy, mode: str, assumptions: Mapping[str, str]) -> ReplayStudy:
    """``study`` (one run) with every group's law set by its category's assumption."""
    n = float(study.base.world_size)
    cats = group_categories(study)
    laws = dict(study.laws)
    for name, t in study.base.group_time.items():
        form = single_run_form(cats.get(name, "host"), mode, assumptions)
        if form == "b/N":
            laws[name] = Law("b/N", (t * n,), "b/N", (t * n,), 0.0)
        else:
            laws[name] = Law("a", (t,), "a", (t,), 0.0)
    return dataclasses.replace(study, laws=laws)
