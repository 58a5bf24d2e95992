"""Stragglers: a run's per-step rows in, the ranks the others wait for (and why) out.

A straggler is late because of its own work, so ranks are compared on their *own* time: the
step minus the time it spent waiting in collectives for someone else (``communication_wait``).
Waiting ranks have a short own time; the late rank a long one. A rank is a straggler when its
own time exceeds the median rank's by more than the step-to-step noise of own times (and by
at least 1% of the step, so a perfectly quiet run does not name ranks for nanoseconds). The
category that makes it late is the one where its own time (cause attribution taken back out:
``caused_<category>`` is other ranks' lateness) exceeds the median rank's the most; a rank late
in no category by more than the noise is not named (a rank-0 reduction the others wait for is
already in every rank's ``reduction`` by cause attribution, and is a finding of its own).
With fewer than :data:`MIN_STEPS` steps per rank the noise cannot be measured (the spread of
one sample), every rank above the median would look late, so nobody is named.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracescale.categories import CATEGORIES
from tracescale.classify.result import CAUSED
from tracescale.groups import group_codes, group_mean, group_std, series_mean
from tracescale.table import as_table

#: Extra own time below this share of the mean step is never called a straggler.
MIN_EXTRA_SHARE = 0.01
#: Steps per rank needed to measure the step-to-step noise a straggler must exceed.
MIN_STEPS = 2


def find_stragglers(steps: Any) -> list[dict[str, Any]]:
    """``[{rank, extra_s, category, own_s, median_own_s}]``, slowest first (empty: none)."""
    steps = as_table(steps)
    if steps.empty or len(np.unique(steps.col("rank"))) < 2:
        return []
    codes, (rank_ids,) = group_codes(steps.col("rank"))
    n = len(rank_ids)
    step_codes, _ = group_codes(codes, steps.col("step"))
    per_rank_steps = np.bincount(codes[np.unique(step_codes, return_index=True)[1]], minlength=n)
    if int(per_rank_steps.min()) < MIN_STEPS:
        return []  # noise unknown: see the module docstring
    own = steps.col("duration") - steps.col("communication_wait")
    own_cat = {}
    for c in CATEGORIES:
        caused = f"caused_{c}"
        col = steps.col(c)
        own_cat[c] = col - steps.col(caused) if c in CAUSED and caused in steps else col
    own_mean = group_mean(codes, own, n)
    cat_mean = {c: group_mean(codes, v, n) for c, v in own_cat.items()}
    median_own = float(np.median(own_mean))
    # Noise: how much one rank's own time moves from step to step (the median rank's spread).
    std = group_std(codes, own, n)
    noise = float(np.median(np.where(np.isnan(std), 0.0, std)))
    floor = MIN_EXTRA_SHARE * series_mean(steps.col("duration"))
    threshold = max(noise, floor)
    out = []
    cats = [c for c in CATEGORIES if c != "communication"]
    medians = {c: float(np.median(cat_mean[c])) for c in cats}
    for g in np.argsort(-own_mean, kind="stable").tolist():
        extra = float(own_mean[g]) - median_own
        if extra <= threshold:
            break
        excess = np.array([float(cat_mean[c][g]) - medians[c] for c in cats])
        if float(excess.max()) <= threshold:
            # Late in no category of its own: its waits were shorter (it does single-rank
            # work the others wait for, already attributed to that work's category).
            continue
        out.append(
            {
                "rank": int(rank_ids[g]),
                "extra_s": extra,
                "category": cats[int(np.argmax(excess))],
                "own_s": float(own_mean[g]),
                "median_own_s": median_own,
                "noise_s": noise,
            }
        )
    return out
