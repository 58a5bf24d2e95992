"""Rank-subset execution on the SPMD engine: a pipeline stage's program on its ranks only.

Why: the engine advances every rank with one call, which is exact while all ranks run the
same program. A pipeline's stages do not (stage s warms up with ``p - s - 1`` forwards, then
alternates, then drains), but the replicas of one stage do, in lockstep order with their own
times. So a stage's operation runs as an ordinary engine call for all ranks, and
:func:`only` then puts the other ranks back: their cursors stay, the events recorded inside
are marked as not theirs, and their intervals for the attribution collapse to nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import numpy as np

from tracescale.simulate.engine import Engine


@contextmanager
def only(e: Engine, mask: np.ndarray) -> Iterator[None]:
    """Program calls inside run on the ranks of ``mask`` only (a pipeline stage's program):
    the other ranks' cursors stay, and what is recorded inside is theirs to skip."""
    h0, free0 = e.h.copy(), {s: v.copy() for s, v in e.free.items()}
    st = e._step
    marks = (len(e.events), *((len(st.compute), len(st.memcpy), len(st.labels),
                                  len(st.comm)) if st else (0, 0, 0, 0)))  # fmt: skip
    first0 = None if st is None or st.first_gpu is None else st.first_gpu.copy()
    sync0 = None if st is None or st.sync_return is None else st.sync_return.copy()
    yield
    keep = mask[None, :]
    e.h = np.where(keep, e.h, h0)
    for s, v in e.free.items():
        e.free[s] = np.where(keep, v, free0[s]) if s in free0 else v
    for i in range(marks[0], len(e.events)):
        t = e.events[i]
        e.events[i] = replace(t, ranks=mask if t.ranks is None else t.ranks & mask)
    if st is None:
        return
    row = mask
    st.compute[marks[1] :] = [(a, np.where(row, b, a)) for a, b in st.compute[marks[1] :]]
    st.memcpy[marks[2] :] = [(a, np.where(row, b, a)) for a, b in st.memcpy[marks[2] :]]
    st.labels[marks[3] :] = [(a, np.where(row, b, a), x) for a, b, x in st.labels[marks[3] :]]
    st.comm[marks[4]:] = [(a, x, b, np.where(row, late, -1))
                          for a, x, b, late in st.comm[marks[4]:]]  # fmt: skip
    if st.first_gpu is not None:
        before = first0 if first0 is not None else np.full(st.first_gpu.shape, -1, np.int64)
        st.first_gpu = np.where(keep, st.first_gpu, before)
    if st.sync_return is not None and sync0 is not None:
        st.sync_return = np.where(keep, st.sync_return, sync0)
