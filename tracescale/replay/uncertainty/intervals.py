"""Each uncertain input's replayed ends -> one 90% interval about the projected step.

A projection is replayed at the point and again at either end of each uncertain input; how
those ends make one interval is a rule of its own, kept apart from the replay that makes them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def combine_ends(t: float, sources: Sequence[Sequence[float]]) -> tuple[float, float]:
    """The interval about ``t`` from each source's ends (the replays at either end of one
    uncertain input): each source's largest factor off ``t`` on each side, combined in
    quadrature on the log scale (the errors are relative, and the low end stays above 0). The
    sources are independent (the steps' noise, the laws' form, an unidentified latency, the
    delays' tail, the step mix), so the truth may sit off the point in several at once, which
    the widest single source alone ignores; summing the factors instead would count every
    source at its 5th percentile together."""
    if t <= 0:
        return t, t
    down = up = 0.0
    for ends in sources:
        logs = [float(np.log(x / t)) for x in ends if x > 0 and np.isfinite(x)]
        down += min(min(logs, default=0.0), 0.0) ** 2
        up += max(max(logs, default=0.0), 0.0) ** 2
    return t * float(np.exp(-np.sqrt(down))), t * float(np.exp(np.sqrt(up)))
