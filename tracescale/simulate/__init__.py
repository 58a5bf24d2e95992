"""Parametric Kineto trace generator for data-parallel training, with an exact truth.json.

``simulate(world_sizes, out)`` writes ``out/ws{N}/<one file per rank>`` and ``out/truth.json``.
The model of one step, per rank, is documented in ``tracescale simulate --help`` and in
:mod:`tracescale.simulate.schedule`; the truth semantics in docs/DESIGN.md.
"""

from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from tracescale.errors import UsageError
from tracescale.simulate import attribution
from tracescale.simulate.events import Emitter
from tracescale.simulate.params import SimParams, make_params, parse_sets
from tracescale.simulate.schedule import T0_NS, Plan, StepShared, emit_rank, make_plan, run_steps
from tracescale.simulate.truth import (
    build_truth,
    closed_form,
    run_truth,
    true_breakdown,
    true_speedup,
    true_step_time,
)
from tracescale.simulate.writer import (
    atomic_write,
    file_name,
    rank_pid,
    trace_document,
    write_trace,
)

__all__ = [
    "SimParams",
    "closed_form",
    "make_params",
    "parse_sets",
    "simulate",
    "true_breakdown",
    "true_speedup",
    "true_step_time",
]


def _write_rank(task: tuple[Plan, int, int, list[StepShared], Path, int]) -> None:
    """Event pass + file write for one rank (a top-level function so workers can run it)."""
    plan, seed, rank, shared, folder, level = task
    em = Emitter(rank=rank, pid=rank_pid(rank), device=rank % 8, enabled=True)
    emit_rank(plan, seed, rank, shared, em)
    doc = trace_document(
        em.events, em.metadata(T0_NS), rank=rank, world_size=plan.n, device=rank % 8, seed=seed
    )
    write_trace(folder / file_name(rank), doc, level)


def simulate(
    world_sizes: list[int],
    out: str | Path,
    *,
    mode: str = "strong",
    steps: int = 5,
    seed: int = 0,
    params: SimParams | None = None,
    compresslevel: int = 6,
    jobs: int = 1,
) -> dict[str, Any]:
    """Write the study and its truth.json; returns the truth document.

    ``jobs`` > 1 writes rank files in worker processes (same bytes: each rank is independent
    once the shared collective times are known).
    """
    params = params or SimParams()
    if mode not in ("strong", "weak"):
        raise UsageError(f"--mode must be strong or weak, not {mode!r}")
    if steps < 1:
        raise UsageError("--steps must be >= 1")
    if seed < 0:
        raise UsageError("--seed must be >= 0")
    sizes = sorted(set(world_sizes))
    if not sizes or sizes[0] < 1:
        raise UsageError("--world-sizes must be positive integers")
    root = Path(out)
    runs = {}
    for n in sizes:
        plan = make_plan(params, n, mode)
        shared, records = run_steps(plan, seed, steps, list(range(n)))
        runs[n] = run_truth(attribution.resolve(records))
        folder = root / f"ws{n}"
        folder.mkdir(parents=True, exist_ok=True)
        keep = {file_name(r) for r in range(n)}
        for old in folder.glob("simhost_*.pt.trace.json.gz"):
            if old.name not in keep:
                old.unlink()
        tasks = [(plan, seed, rank, shared, folder, compresslevel) for rank in range(n)]
        if jobs > 1 and n > 1:
            with ProcessPoolExecutor(max_workers=min(jobs, n)) as pool:
                list(pool.map(_write_rank, tasks))
        else:
            for task in tasks:
                _write_rank(task)
    truth = build_truth(params, mode, seed, steps, sizes, runs)
    atomic_write(root / "truth.json", (json.dumps(truth, indent=1) + "\n").encode())
    return truth
