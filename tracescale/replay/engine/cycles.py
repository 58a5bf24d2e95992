"""Cycles of steps: a run's graph and kept steps in, one weight per kept step out, so a mean
over the steps counts every phase of a repeating cycle equally.

Why: with gradient accumulation every k-th step differs (its collectives and optimizer), and a
profile rarely holds a whole number of cycles (8 steps of a 3-step cycle hold 2 optimizer
steps, not 8/3). The plain mean then weighs the expensive phase by 2/8 instead of 1/3: small
where that phase is cheap (one GPU) and growing with N as its collectives grow, which read as
a speedup 10-28% too high at 2-8x the largest run. Steps repeat exactly in what they launch,
so the cycle is the shortest period of the per-step count of device nodes. The same kinds
of step are the strata of the bootstrap over steps (:func:`bootstrap_mean`), which must not
read the cycle as noise.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tracescale.replay.graph.build import DEV, Graph
from tracescale.scaling.blocks import blocks_note, resampled_means
from tracescale.scaling.quantiles import Z95, student_t95

F64 = npt.NDArray[np.float64]
#: Bootstrap resamples of the steps' mean.
_BOOT = 200


def cycle_period(signature: npt.NDArray[np.int64]) -> int:
    """Shortest period p >= 2 with ``signature[k] == signature[k + p]`` for every k, holding at
    least one whole repeat (p <= len/2); 1 when the steps are alike or show no cycle."""
    n = len(signature)
    if n < 2 or bool(np.all(signature == signature[0])):
        return 1
    # The shortest period of a sequence is its length less its longest proper border (prefix
    # that is also a suffix): one pass of Knuth-Morris-Pratt's failure function, where trying
    # every p was quadratic in the steps. A longer period <= n/2 exists only if the shortest
    # is <= n/2 too (Fine and Wilf), so the shortest alone decides.
    sig = signature.tolist()
    border = [0] * n
    k = 0
    for i in range(1, n):
        while k and sig[i] != sig[k]:
            k = border[k - 1]
        if sig[i] == sig[k]:
            k += 1
        border[i] = k
    p = n - border[-1]
    return p if p <= n // 2 else 1


def step_signature(graph: Graph, kept: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    """Per kept step, its count of device nodes (steps of one phase launch the same work)."""
    on = (graph.kind >= DEV) & (graph.dur > 0) & (graph.step >= 0)
    counts = np.bincount(graph.step[on], minlength=len(kept))[: len(kept)]
    return counts[kept].astype(np.int64)


@dataclass(frozen=True)
class StepMix:
    """How the kept steps enter a mean, from their signatures, worked out once per run."""

    #: Per step, its weight in the mean step (sum 1).
    weights: F64
    #: Per step, its kind for :func:`bootstrap_mean`, where the kinds follow a cycle (a whole
    #: repeat, or a rare kind whose recurrence the window bounds); None otherwise: steps
    #: alike, or kinds that mix with no cycle to them, where how often each appears is itself
    #: noise, which the iid bootstrap keeps.
    strata: npt.NDArray[np.int64] | None
    #: Weights for the interval's ends where :func:`rare_kind` estimated the mix: the rare
    #: kind's share divided by ``MIX_SPREAD`` (a period longer than the window shows) and as
    #: estimated (the shortest the window allows is the most it can recur).
    ends: tuple[F64, ...]


def step_mix(signature: npt.NDArray[np.int64]) -> StepMix:
    """Weights (each phase of a cycle 1/period, shared by its kept steps; equal without a
    cycle), bootstrap strata and interval ends from the kept steps' signatures."""
    m = len(signature)
    if m == 0:
        return StepMix(np.zeros(0), None, ())
    p = cycle_period(signature)
    if p > 1:
        if m % p == 0:
            weights = np.full(m, 1.0 / m)
        else:
            phase = np.arange(m) % p
            weights = 1.0 / (p * np.bincount(phase, minlength=p)[phase])
        return StepMix(weights, signature, ())
    rare = rare_kind(signature)
    if rare is None:
        return StepMix(np.full(m, 1.0 / m), None, ())
    mask, share = rare
    ends = (_mix(mask, share / MIX_SPREAD), _mix(mask, share))
    return StepMix(_mix(mask, share), signature, ends)


def rare_kind(signature: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.bool_], float] | None:
    """Where two kinds of step alternate with no whole cycle in the window: the rarer kind's
    steps and its share of a long run of steps; None otherwise (alike steps, more kinds, no
    even spacing).

    The share is one over the shortest period the window allows: a kind seen once, at
    position i of m steps, has no other occurrence among the i steps before it nor the
    m - i - 1 after, so it recurs at least every max(i + 1, m - i) steps; seen c >= 2 times
    evenly d apart (with none missing at either edge), every d. Why the shortest: over a
    window whose start is independent of the cycle, a period p shows the kind just there
    with probability 1/p, so the shortest consistent period is the likeliest. Five steps of
    a 4-step accumulation cycle hold one optimizer step, at position 3: period 4, share 1/4,
    where the plain mean gave 1/5 (a speedup 16% too high at 8x; with 6 steps 1/6, 30%).
    A kind seen at uneven spacing follows no cycle: None (equal weights)."""
    m = len(signature)
    kinds, counts = np.unique(signature, return_counts=True)
    if len(kinds) != 2 or 2 * int(counts.min()) >= m:
        return None
    mask = signature == kinds[int(np.argmin(counts))]
    at = np.flatnonzero(mask)
    c = len(at)
    if c == 1:
        return mask, min(1.0 / max(at[0] + 1, m - at[0]), 0.5)
    gaps = np.diff(at)
    d = int(gaps[0])
    if bool(np.all(gaps == d)) and at[0] < d and m - 1 - at[-1] < d:
        return mask, min(1.0 / d, 0.5)
    return None


def _mix(mask: npt.NDArray[np.bool_], share: float) -> F64:
    """Weights giving the ``mask`` steps ``share`` of the mean and the others the rest."""
    c, m = int(mask.sum()), len(mask)
    return np.where(mask, share / c, (1.0 - share) / (m - c))


#: The rare kind's share at the interval's low end: this fraction of the estimate (it could
#: recur more rarely than the window suggests; it cannot recur more often).
MIX_SPREAD = 2.0


def weighted_mean(steps: F64, weights: F64) -> float:
    """The cycle-weighted mean of ``steps`` (the plain mean when the weights do not fit)."""
    if len(steps) == 0:
        return float("nan")
    if len(weights) != len(steps):
        return float(np.mean(steps))
    return float(np.sum(steps * weights))


def bootstrap_mean(
    steps: F64,
    seed: int,
    centre: float | None = None,
    strata: npt.NDArray[np.int64] | None = None,
    weights: F64 | None = None,
) -> tuple[float, float]:
    """5-95% interval of the mean step over a bootstrap of ``steps``, moved to ``centre`` (a
    cycle-weighted mean) when given.

    With ``strata`` (a label per step: its kind, ``RunReplay.strata``) and ``weights`` the
    steps are resampled within each kind and the kinds keep their weights: the optimizer step
    of a 4-step accumulation cycle recurs every 4th step by construction, and an iid bootstrap
    that draws it 0 to 4 times out of 8 read the cycle as noise (a speedup interval of -78% to
    +143% at 8x for a projection within 3%)."""
    if len(steps) == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    if strata is None or weights is None or len(strata) != len(steps):
        means = resampled_means(steps, rng, _BOOT)
        point = float(np.mean(steps))
    else:
        means = np.zeros(_BOOT)
        point = 0.0
        for kind in np.unique(strata):
            members = steps[strata == kind]
            share = float(weights[strata == kind].sum())
            means += share * resampled_means(members, rng, _BOOT)
            point += share * float(members.mean())
    lo, hi = np.percentile(means, [5.0, 95.0])
    # A bootstrap of few steps is too narrow: it reads the spread with divisor n, not n - 1,
    # and at the normal's quantile, not Student's. Widened by both (1.65x at 4 steps, 1.23x
    # at 8, 1.05x at 30), it is the t interval of the mean where steps are near normal.
    f = small_sample_factor(len(steps))
    lo, hi = point - f * (point - float(lo)), point + f * (float(hi) - point)
    shift = 0.0 if centre is None else centre - point
    return lo + shift, hi + shift


def resampled_notes(steps: Iterable[int]) -> list[str]:
    """The assumption the projections' intervals state where a run's bootstrap resampled
    blocks of steps (``steps``: each run's kept steps); none where every run resampled steps."""
    note = blocks_note(max(steps, default=0))
    return [] if note is None else [note]


def small_sample_factor(n: int) -> float:
    """How much wider Student's t interval of a mean of ``n`` draws is than the percentile
    bootstrap's: ``t95(n - 1) / z95 * sqrt(n / (n - 1))`` (1 for fewer than 2 draws)."""
    if n < 2:
        return 1.0
    return student_t95(n - 1) / Z95 * float(np.sqrt(n / (n - 1)))
