"""Pattern-specific parts of a pattern study's truth: what one step time cannot say.

Why apart from :mod:`tracescale.simulate.pattern_run`: each answers a question only its
pattern raises, always from the same event schedule the traces come from.

- ``pp``: the baseline is N = pp_stages (the smallest pipeline), not N = 1; the serial
  fraction is the intercept of the step's line in the microbatch count, T(m) = T0 + m c
  (a 1F1B step with m >= p - 1 is exactly that line, noise-free): T_inf = T0 (fill, drain,
  transfers between stages, once-per-step work), T(1) = T0 + M p c (the global batch's work
  on one GPU); per category likewise. The 1F1B bubble's textbook share
  (p - 1) / (v m + p - 1) is given beside it for each N.
- ``moe``: ``expert_imbalance``, the step with the drawn expert loads minus the same step with
  balanced ones (the same random stream, loads all 1).
- ``act_ckpt``: ``recompute``, the GPU seconds per step of forward kernels run again.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from tracescale.categories import CATEGORIES
from tracescale.errors import UsageError
from tracescale.simulate import attribution, checkpointing, pipeline, runner, sharded
from tracescale.simulate.engine import Engine
from tracescale.simulate.params import SimParams
from tracescale.simulate.spec import PatternSpec


def check_sizes(spec: PatternSpec, params: SimParams, mode: str, sizes: list[int]) -> None:
    """Refuse world sizes the pattern cannot run (before anything is written)."""
    for n in sizes:
        if spec.base == "pp":
            pipeline.shape(params, n, mode)
        elif spec.base == "hsdp":
            sharded.shard_size(params, n)
    if spec.base == "pp" and params.virtual_stages > 1 and params.layers < params.virtual_stages:
        raise UsageError("pp: layers must be >= virtual_stages (each chunk holds a layer)")


def baseline(spec: PatternSpec, params: SimParams) -> int:
    """The world size speedups are relative to."""
    return params.pp_stages if spec.base == "pp" else 1


def run_extras(
    spec: PatternSpec, params: SimParams, mode: str, seed: int, steps: int, e: Engine
) -> dict[str, Any]:
    """truth.json's pattern fields of one traced run (``e``)."""
    out: dict[str, Any] = {}
    if spec.has("act_ckpt"):
        out["recompute"] = _per_step(e, steps)
    if spec.base == "moe":
        flat = runner.run(spec, dataclasses.replace(params, imbalance=0.0), e.n, mode,
                               steps, seed, record=False)  # fmt: skip
        out["expert_imbalance"] = (
            float(np.stack(e.durations).mean()) - float(np.stack(flat.durations).mean())
        ) * 1e-9
    return out


def _per_step(e: Engine, steps: int) -> float:
    tally = e.tallies.get(checkpointing.RECOMPUTE)
    return 0.0 if tally is None else float(tally.mean()) / steps * 1e-9


def model_extras(
    spec: PatternSpec, params: SimParams, mode: str, sizes: list[int], seed: int,
    expected: dict[int, float],
) -> dict[str, Any]:  # fmt: skip
    """truth.json's ``model`` fields of the pattern at every N of ``sizes``."""
    out: dict[str, Any] = {}
    if spec.base == "moe":
        flat = dataclasses.replace(params, imbalance=0.0)
        out["expert_imbalance"] = {
            str(n): expected[n] - runner.expected_step(spec, flat, mode, n, seed)[0] for n in sizes
        }
    if spec.has("act_ckpt"):
        cycle = spec.cycle(params.accum_steps)
        rec = {}
        for n in sizes:
            e, _ = runner.expected_run(spec, params, mode, n, seed)
            warm = runner.warmup(spec)
            total = _per_step(e, warm + cycle) * (warm + cycle)
            rec[str(n)] = total / (warm + cycle)
        out["recompute_time"] = rec
    if spec.base == "pp":
        p, v = params.pp_stages, params.virtual_stages
        micro = {n: pipeline.shape(params, n, mode)[1] for n in sizes}
        out["pipeline"] = {
            "stages": p,
            "virtual_stages": v,
            "microbatches_per_replica": {str(n): m for n, m in micro.items()},
            "bubble_share_1f1b": {str(n): (p - 1) / (v * m + p - 1) for n, m in micro.items()},
        }
    return out


def pp_serial(
    spec: PatternSpec, params: SimParams, seed: int
) -> tuple[float, float, dict[str, float]]:
    """(T_inf, T(1), T_inf per category) of a pipeline, from its line in the microbatch count
    (module docstring): noise-free, data loading's divided part and the batch copy away."""
    p, v, big_m = params.pp_stages, params.virtual_stages, params.microbatches
    small = p * v

    def at(m: int) -> dict[str, float]:
        scale = m / big_m  # keep one microbatch's work as it is
        q = dataclasses.replace(params, jitter=0.0, microbatches=m, fwd_time=params.fwd_time *
                                scale, bwd_time=params.bwd_time * scale, dl_parallel=0.0,
                                h2d_time=0.0, tail_median=0.0)  # fmt: skip
        warm = runner.warmup(spec)
        e = runner.run(spec, q, p, "strong", warm + spec.cycle(q.accum_steps), seed,
                            record=True)  # fmt: skip
        rows = [t for ts in attribution.resolve(e.records).values() for t in ts[warm:]]
        return {c: math.fsum(t.categories[c] for t in rows) * 1e-9 / len(rows) for c in CATEGORIES}

    lo, hi = at(small), at(2 * small)
    parts = {c: max(0.0, 2 * lo[c] - hi[c]) for c in CATEGORIES}
    slope = (sum(hi.values()) - sum(lo.values())) / small
    t_inf = sum(parts.values())
    return t_inf, t_inf + big_m * p * slope, parts
