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
import pandas as pd

from tracescale.categories import CATEGORIES
from tracescale.classify.result import CAUSED

#: Extra own time below this share of the mean step is never called a straggler.
MIN_EXTRA_SHARE = 0.01
#: Steps per rank needed to measure the step-to-step noise a straggler must exceed.
MIN_STEPS = 2


def find_stragglers(steps: pd.DataFrame) -> list[dict[str, Any]]:
    """``[{rank, extra_s, category, own_s, median_own_s}]``, slowest first (empty: none)."""
    if steps.empty or steps["rank"].nunique() < 2:
        return []
    if int(steps.groupby("rank")["step"].nunique().min()) < MIN_STEPS:
        return []  # noise unknown: see the module docstring
    df = steps.copy()
    df["own"] = df["duration"] - df["communication_wait"]
    for c in CATEGORIES:
        caused = f"caused_{c}"
        df[f"own_{c}"] = df[c] - df[caused] if c in CAUSED and caused in df else df[c]
    per_rank = df.groupby("rank")[["own", *(f"own_{c}" for c in CATEGORIES)]].mean()
    median_own = float(per_rank["own"].median())
    # Noise: how much one rank's own time moves from step to step (the median rank's spread).
    noise = float(df.groupby("rank")["own"].std(ddof=1).fillna(0.0).median())
    floor = MIN_EXTRA_SHARE * float(df["duration"].mean())
    threshold = max(noise, floor)
    out = []
    cats = [c for c in CATEGORIES if c != "communication"]
    medians = per_rank[[f"own_{c}" for c in cats]].median()
    ordered = per_rank.sort_values("own", ascending=False, kind="mergesort")
    for rank, (_, row) in zip(ordered.index.tolist(), ordered.iterrows(), strict=True):
        extra = float(row["own"]) - median_own
        if extra <= threshold:
            break
        excess = np.array([float(row[f"own_{c}"]) - float(medians[f"own_{c}"]) for c in cats])
        if float(excess.max()) <= threshold:
            # Late in no category of its own: its waits were shorter (it does single-rank
            # work the others wait for, already attributed to that work's category).
            continue
        out.append(
            {
                "rank": int(rank),
                "extra_s": extra,
                "category": cats[int(np.argmax(excess))],
                "own_s": float(row["own"]),
                "median_own_s": median_own,
                "noise_s": noise,
            }
        )
    return out
