"""Running a pattern's program on the engine: a whole run, its expected (noise-free) step time.

Why a module of its own: the study (:mod:`~tracescale.simulate.pattern_run`) and the pattern
truth extras (:mod:`~tracescale.simulate.extras`) both run the engine, the study then asks the
extras for their fields; with the runs here, both import this module and neither the other.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tracescale.simulate import pipeline, programs
from tracescale.simulate.cuda_graph import engine_class
from tracescale.simulate.engine import Engine
from tracescale.simulate.params import SimParams
from tracescale.simulate.spec import PatternSpec

#: ranks x replicas simulated at once for the expectation over random delays
DRAWS = 200_000
MIN_REPLICAS = 64


def run(
    spec: PatternSpec,
    params: SimParams,
    n: int,
    mode: str,
    steps: int,
    seed: int,
    *,
    record: bool,
    replicas: int = 1,
    div: float | None = None,
) -> Engine:
    """Simulate ``steps`` ProfilerSteps of ``n`` ranks (x ``replicas``) from aligned starts."""
    if div is None:
        div = float(data_parallel(spec, params, n)) if mode == "strong" else 1.0
    rng = np.random.default_rng([seed, n, 11])
    engine = engine_class(spec.has("cuda_graph"))
    e = engine(params, n, div, replicas, rng, record, legacy_nccl=spec.has("multinode"))
    for k in range(steps):
        one_step(e, spec, k, mode)
    return e


def one_step(e: Engine, spec: PatternSpec, index: int, mode: str) -> None:
    """The pattern's program for ProfilerStep ``index``."""
    if spec.base == "pp":
        pipeline.step(e, spec, index, e.p.first_step, mode)
    else:
        programs.step(e, spec, index, e.p.first_step)


def data_parallel(spec: PatternSpec, params: SimParams, n: int) -> int:
    """How many ways the batch is split at ``n`` ranks (a pipeline's DP degree)."""
    return n // params.pp_stages if spec.base == "pp" else n


def warmup(spec: PatternSpec) -> int:
    """Steps run before the expectation is taken: a pipeline's stages leave a step at different
    times, so its steady state is reached after a step or two from an aligned start."""
    return 2 if spec.base == "pp" else 0


def expected_step(
    spec: PatternSpec, params: SimParams, mode: str, n: int, seed: int, div: float | None = None
) -> tuple[float, int]:
    """Noise-free expected step time (s) at ``n`` over one cycle; returns (seconds, replicas)."""
    e, replicas = expected_run(spec, params, mode, n, seed, div)
    per_step = np.stack(e.durations[warmup(spec) :])  # (cycle, replicas, ranks)
    return float(per_step.mean()) * 1e-9, replicas


def expected_run(
    spec: PatternSpec, params: SimParams, mode: str, n: int, seed: int, div: float | None = None
) -> tuple[Engine, int]:
    """The noise-free run :func:`expected_step` averages (warm-up steps, then one cycle)."""
    quiet = dataclasses.replace(params, jitter=0.0)
    random = (spec.has("heavy_tail") and quiet.tail_median > 0) or (
        spec.base == "moe" and quiet.imbalance > 0 and n > 1
    )
    replicas = max(MIN_REPLICAS, DRAWS // n) if random else 1
    steps = warmup(spec) + spec.cycle(quiet.accum_steps)
    e = run(spec, quiet, n, mode, steps, seed + 1_000_003, record=False, replicas=replicas,
            div=div)  # fmt: skip
    return e, replicas
