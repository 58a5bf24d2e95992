"""Parametric Kineto trace generator for distributed training, with an exact truth.json.

``simulate(world_sizes, out)`` writes ``out/ws{N}/<one file per rank>`` and ``out/truth.json``.
The default data-parallel step is :mod:`tracescale.simulate.schedule`; the training patterns
(FSDP, tensor parallel, gradient accumulation, multi-node, launch-bound, heavy-tailed delays,
per-type latencies) run on the event-level :mod:`tracescale.simulate.engine`. Both are
documented in ``tracescale simulate --help``; the truth semantics in docs/DESIGN.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from tracescale.errors import UsageError
from tracescale.simulate import attribution
from tracescale.simulate.events import Emitter
from tracescale.simulate.params import SimParams, make_params, parse_sets
from tracescale.simulate.pattern_run import simulate_pattern
from tracescale.simulate.schedule import T0_NS, Plan, StepShared, emit_rank, make_plan, run_steps
from tracescale.simulate.spec import PRESETS, PatternSpec, parse_pattern
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
    "PatternSpec",
    "SimParams",
    "closed_form",
    "make_params",
    "parse_pattern",
    "parse_sets",
    "pattern_params",
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


def _report_files(progress: Callable[[str], None], n: int, done: int) -> None:
    if n >= 8 and (done % 8 == 0 or done == n):
        progress(f"  N={n}: wrote {done}/{n} rank files")


def _quiet(_: str) -> None:
    """The default progress sink: the library never prints."""


def pattern_params(
    pattern: str | PatternSpec, overrides: dict[str, float | int] | None = None
) -> SimParams:
    """The pattern's preset parameters with the user's ``overrides`` on top, validated."""
    spec = _spec(pattern)
    preset: dict[str, float | int] = dict(PRESETS.get(spec.base, {}))
    for modifier in sorted(spec.modifiers):
        preset.update(PRESETS.get(modifier, {}))
    merged = {**preset, **(overrides or {})}
    if (
        spec.has("multinode")
        and "bandwidth" in merged
        and "inter_bandwidth" not in (overrides or {})
    ):
        merged["inter_bandwidth"] = float(merged["bandwidth"]) / 6
    return make_params(merged)


def _spec(pattern: str | PatternSpec) -> PatternSpec:
    if isinstance(pattern, PatternSpec):
        return pattern
    try:
        return parse_pattern(pattern)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def simulate(
    world_sizes: list[int],
    out: str | Path,
    *,
    mode: str = "strong",
    steps: int | None = None,
    seed: int = 0,
    params: SimParams | None = None,
    compresslevel: int = 6,
    jobs: int = 1,
    pattern: str | PatternSpec = "ddp",
    truth_at: list[int] | None = None,
    progress: Callable[[str], None] = _quiet,
) -> dict[str, Any]:
    """Write the study and its truth.json; returns the truth document.

    ``pattern`` "ddp" (alone) is the default data-parallel study; anything else runs on the
    event-level engine (see :mod:`tracescale.simulate.programs`). ``steps`` defaults to 5, two
    optimizer cycles under ``grad_accum``, 20 under ``heavy_tail``. ``truth_at`` adds world
    sizes to the truth's step time and speedup (default 2x, 4x, 8x the largest). ``jobs`` > 1
    writes default-study rank files in worker processes (same bytes). ``progress`` gets one
    line per stage (the CLI prints it on stderr).
    """
    spec = _spec(pattern)
    params = params or (SimParams() if spec.name == "ddp" else pattern_params(spec))
    if steps is None:
        # random per-rank delays need enough draws per rank for their distribution to show
        steps = max(5, 2 * spec.cycle(params.accum_steps), 20 if spec.has("heavy_tail") else 0)
    if mode not in ("strong", "weak"):
        raise UsageError(f"--mode must be strong or weak, not {mode!r}")
    if steps < 1:
        raise UsageError("--steps must be >= 1")
    if seed < 0:
        raise UsageError("--seed must be >= 0")
    sizes = sorted(set(world_sizes))
    if not sizes or sizes[0] < 1:
        raise UsageError("--world-sizes must be positive integers")
    if truth_at is None:  # what a user projects to: 2x, 4x and 8x the largest measured N
        truth_at = [2 * sizes[-1], 4 * sizes[-1], 8 * sizes[-1]]
    extra = sorted(set(truth_at))
    if extra and extra[0] < 1:
        raise UsageError("--truth-at must be positive integers")
    root = Path(out)
    if spec.name != "ddp":
        return simulate_pattern(
            spec, sizes, root, params=params, mode=mode, steps=steps, seed=seed,
            truth_at=extra, compresslevel=compresslevel, progress=progress,
        )  # fmt: skip
    runs = {}
    for n in sizes:
        progress(f"simulating ddp N={n} ({steps} steps)")
        plan = make_plan(params, n, mode)
        shared, records = run_steps(plan, seed, steps, list(range(n)))
        runs[n] = run_truth(attribution.resolve(records))
        folder = root / f"ws{n}"
        folder.mkdir(parents=True, exist_ok=True)
        keep = {file_name(r) for r in range(n)}
        for old in folder.glob("sim*.pt.trace.json.gz"):  # also a pattern run's simnode files
            if old.name not in keep:
                old.unlink()
        tasks = [(plan, seed, rank, shared, folder, compresslevel) for rank in range(n)]
        if jobs > 1 and n > 1:
            with ProcessPoolExecutor(max_workers=min(jobs, n)) as pool:
                for done, _ in enumerate(pool.map(_write_rank, tasks), 1):
                    _report_files(progress, n, done)
        else:
            for done, task in enumerate(tasks, 1):
                _write_rank(task)
                _report_files(progress, n, done)
    progress("truth")
    truth = build_truth(params, mode, seed, steps, sizes, runs, extra)
    atomic_write(root / "truth.json", (json.dumps(truth, indent=1) + "\n").encode())
    return truth
