"""Pipeline-parallel p2p nodes: the representative rank's send/recv kernels per step in, one
law in N for their time out.

Why not the collectives' model: a stage's recv kernel is launched ahead and runs until the
neighbouring stage's activation (or gradient) arrives, so its time is the pipeline's
dependency on the other stages (fill, drain, the per-microbatch transfers), not a transfer
plus a wait for the slowest rank. Read as a collective, the skew between stages (they run
different programs) became rank-to-rank variability and the alpha-beta ratio of a
two-rank group kept each node's time as measured. With a fixed global batch, DP replicas
run fewer microbatches as N grows: the p2p nodes' count per step changes with N (as
``kernel_pools`` pools kernels whose count changes), and their total per step is fitted as
one law: ``a`` the bubble (fill and drain do not shrink), ``b/N`` the per-microbatch part.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from tracescale.replay.engine.run import RunReplay
from tracescale.replay.graph.build import DEV
from tracescale.replay.laws.nodes import Law, fit_form, fit_law

#: Classify's collective type of send/recv kernels and calls.
P2P = "sendrecv"


def p2p_rows(coll: pd.DataFrame) -> npt.NDArray[np.bool_]:
    """Which rows of a run's ``coll`` table are pipeline p2p nodes (send/recv between two
    ranks)."""
    if not len(coll):
        return np.zeros(0, dtype=np.bool_)
    kind = coll["collective"].astype(str).to_numpy()
    group = coll["group"].to_numpy(dtype=np.float64)
    return np.asarray((kind == P2P) & (group <= 2), dtype=np.bool_)


def p2p_time(run: RunReplay) -> float:
    """Seconds per kept step the representative rank spends in p2p nodes (wait + transfer)."""
    rows = p2p_rows(run.coll)
    if not rows.any():
        return 0.0
    g = run.graph
    nodes = run.coll["node"].to_numpy()[rows]
    step = g.step[nodes]
    kept = run.kept
    ok = (step >= 0) & kept[np.clip(step, 0, None)]
    return float(g.dur[nodes[ok]].sum()) / 1e9 / max(int(kept.sum()), 1)


def fit_p2p_law(runs: Sequence[RunReplay]) -> Law | None:
    """The p2p nodes' law across the runs (:func:`p2p_law`; None where no run has any)."""
    pts = [(r.world_size, p2p_time(r)) for r in runs if p2p_rows(r.coll).any()]
    if not pts:
        return None
    return p2p_law([n for n, _ in pts], [t for _, t in pts])


def p2p_law(sizes: Sequence[float], values: Sequence[float]) -> Law:
    """``a + b/N`` over the p2p time per step at each N, whatever form the leave-one-out
    choice would pick (it stays the runner-up, for the model-form spread).

    Why forced: a pipeline fills and drains at any N, so its p2p time has a constant part;
    with few stages it is small next to the microbatches' part at the measured N, and the
    one-standard-error tie rule read it as ``b/N``, though it is what grows in share with N."""
    law = fit_law(sizes, values)
    if law.form == "a+b/N" or len(set(sizes)) < 2:
        return law
    return Law("a+b/N", fit_form("a+b/N", sizes, values), law.form, law.coef, law.cv_error)


def fixed_tail(run: RunReplay) -> npt.NDArray[np.bool_]:
    """Per node of ``run``'s graph: microbatch work after the step's last p2p dependency,
    which keeps its measured time at any N.

    Why: with a fixed global batch, N shrinks the count of microbatches, not their size; the
    kernel laws' ``b/N`` is that count, spread in the replay over the measured microbatches.
    Before a stage's last recv of the step the p2p law holds the pipeline's pace; after it
    the stage runs one microbatch's work (the last backward, on the last stage the last
    forward and backward) of fixed size, which the law's ratio would shrink. Which: the
    kernels on the stream of the step's last node gated by a p2p node (its cross-stream
    producer), from that node on, whose kernel group repeats in the step (microbatch work;
    an optimizer kernel once per step keeps its own law)."""
    g = run.graph
    out = np.zeros(len(g), dtype=np.bool_)
    rows = p2p_rows(run.coll)
    if not rows.any():
        return out
    p2p = np.zeros(len(g), dtype=np.bool_)
    p2p[run.coll["node"].to_numpy()[rows]] = True
    gated = (g.kind == DEV) & (g.dep2 >= 0) & p2p[np.clip(g.dep2, 0, None)] & ~p2p
    dev = (g.kind == DEV) & ~p2p
    for k in range(len(g.step_first)):
        in_step = g.step == k
        last = np.flatnonzero(gated & in_step)
        if not len(last):
            continue
        at = last[np.argmax(g.start[last])]
        mine = np.flatnonzero(dev & in_step & (g.res == g.res[at]))
        counts = np.bincount(g.group[mine], minlength=len(g.groups))
        tail = mine[(g.start[mine] >= g.start[at]) & (counts[g.group[mine]] >= 2)]
        out[tail] = True
    return out
