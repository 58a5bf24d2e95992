"""Law-group labels of host nodes: a node's law group is named by what it is (the innermost
op of a gap, the runtime call), with step numbers dropped so one op in every step shares a
law; names in, group ids out, each distinct label numbered once."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from tracescale.ingest.trace import STEP_PREFIX, RankTrace

I64 = npt.NDArray[np.int64]
_STEP_SUFFIX = re.compile(r"#\d+$")


class LawGroups:
    """Law groups numbered in order of first appearance over the nodes, host threads first."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def number(self, code: I64, label: Callable[[int], str]) -> I64:
        """Group ids of nodes whose label is ``label(code)``: codes are labelled once each."""
        if len(code) == 0:
            return np.zeros(0, dtype=np.int64)
        uniq, first_at, inverse = np.unique(code, return_index=True, return_inverse=True)
        gid = np.empty(len(uniq), dtype=np.int64)
        for u in np.argsort(first_at, kind="stable").tolist():
            gid[u] = self.ids.setdefault(label(int(uniq[u])), len(self.ids))
        return gid[inverse.reshape(-1)]


def step_free_names(trace: RankTrace) -> tuple[list[str], I64]:
    """Each string with its step number dropped (``ProfilerStep#12`` -> ``ProfilerStep``), and
    for each string id the id that stands for its law group's label: every ``ProfilerStep#N``
    name stands for the first, so a gap under a step is labelled once, not once per step (a
    million labels and regex calls for a trace of a million steps)."""
    strings = trace.strings
    is_step = trace.step_names
    canon = np.arange(len(strings), dtype=np.int64)
    steps = np.flatnonzero(is_step)
    names = list(strings)
    if len(steps):
        canon[steps] = steps[0]
        bare = STEP_PREFIX[:-1]
        for i in steps.tolist():
            names[i] = bare
    for i in np.flatnonzero(~is_step).tolist():
        names[i] = _STEP_SUFFIX.sub("", names[i])
    return names, canon
