"""How many steps a bootstrap resamples: a trace's step count in, each step's block out.

Why a bound: a replicate draws one weight per step, so 200 replicates of a trace of a million
1 ns steps held 200 million weights (1.6 GB) and the products over them. Beyond
``MAX_RESAMPLED`` steps the steps are resampled in that many blocks of consecutive steps
instead: a replicate draws blocks and weighs each by its steps. For a mean over steps a block
bootstrap estimates the same spread as one over single steps, and stays right where
neighbouring steps are correlated (a slow phase spanning several steps); at this many blocks
the percentile interval is as fine as the steps' would be. Below the bound nothing changes.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

#: Most columns of steps a bootstrap replicate draws over.
MAX_RESAMPLED = 4096


def step_blocks(n: int, cap: int = MAX_RESAMPLED) -> npt.NDArray[np.int64]:
    """Block of each of ``n`` consecutive steps: ``min(n, cap)`` blocks of sizes differing by
    at most one (the identity when ``n <= cap``)."""
    if n <= cap:
        return np.arange(n, dtype=np.int64)
    return (np.arange(n, dtype=np.int64) * cap) // n


def blocks_note(n_steps: int) -> str | None:
    """The sentence an interval carries where its bootstrap resampled blocks of steps (None
    where it resampled the steps themselves)."""
    if n_steps <= MAX_RESAMPLED:
        return None
    return (
        f"the intervals' bootstrap resamples the {n_steps:,} steps of a run in "
        f"{MAX_RESAMPLED:,} blocks of consecutive steps (a bounded number of draws per "
        "replicate)"
    )


def resampled_means(x: F64, rng: np.random.Generator, replicates: int) -> F64:
    """``replicates`` bootstrap means of ``x``: over its values, or beyond ``MAX_RESAMPLED``
    values over that many blocks of consecutive ones (each replicate draws blocks and divides
    their sum by their steps), so a replicate holds a bounded number of draws however many
    steps the trace has (200 replicates of a million steps were 1.6 GB; the comparison's
    2,000 were 16 GB)."""
    if len(x) <= MAX_RESAMPLED:
        idx = rng.integers(0, len(x), size=(replicates, len(x)))
        return np.asarray(x[idx].mean(axis=1), dtype=np.float64)
    block = step_blocks(len(x))
    sums = np.bincount(block, weights=x)
    counts = np.bincount(block).astype(np.float64)
    idx = rng.integers(0, len(sums), size=(replicates, len(sums)))
    return np.asarray(sums[idx].sum(axis=1) / counts[idx].sum(axis=1), dtype=np.float64)
