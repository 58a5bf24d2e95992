"""Ground truth of a simulated study: exact per-run breakdowns and the noise-free model.

Per simulated N the truth is the perfect attribution of the schedule itself (jitter included;
see :mod:`tracescale.simulate.attribution`). At any N, :func:`true_breakdown` lays out one
noise-free step for representative ranks (rank 0, one ordinary rank, the straggler): without
jitter all ordinary ranks are identical, so this is exact and cheap even at N=1024.
:func:`closed_form` gives the same numbers as formulas (``a_c + b_c/N + o(N)``) while the host
runs ahead of the GPU (every kernel at least ``launch_overhead`` long); tests check that they
agree where that holds.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

from tracescale.categories import CATEGORIES
from tracescale.simulate import attribution
from tracescale.simulate.params import SimParams, params_dict
from tracescale.simulate.schedule import (
    D2H_NS,
    ITEM_TAIL_NS,
    SYNC_RETURN_NS,
    Plan,
    make_plan,
    run_steps,
)

NS = 1e-9


def _representatives(params: SimParams, n: int) -> dict[int, int]:
    """rank -> how many ranks it stands for in a noise-free run."""
    special = {0}
    if 0 <= params.straggler_rank < n:
        special.add(params.straggler_rank)
    reps = dict.fromkeys(special, 1)
    if n > len(special):
        generic = min(r for r in range(n) if r not in special)
        reps[generic] = n - len(special)
    return reps


@functools.lru_cache(maxsize=4096)
def true_breakdown(params: SimParams, mode: str, n: int) -> dict[str, float]:
    """Noise-free mean seconds per step per category over the N ranks (cross-rank cause)."""
    quiet = _without_jitter(params)
    reps = _representatives(quiet, n)
    _, records = run_steps(make_plan(quiet, n, mode), 0, 1, sorted(reps))
    truth = attribution.resolve(records)
    out = dict.fromkeys(CATEGORIES, 0.0)
    for rank, weight in reps.items():
        for c in CATEGORIES:
            out[c] += truth[rank][0].categories[c] * NS * weight / n
    return out


def true_step_time(params: SimParams, mode: str, n: int) -> float:
    """Noise-free step time (seconds) at any N."""
    return sum(true_breakdown(params, mode, n).values())


def true_speedup(params: SimParams, mode: str, n: int) -> float:
    """Strong: T(1)/T(N). Weak: throughput speedup N*T(1)/T(N)."""
    ratio = true_step_time(params, mode, 1) / true_step_time(params, mode, n)
    return ratio * n if mode == "weak" else ratio


def _without_jitter(params: SimParams) -> SimParams:
    return dataclasses.replace(params, jitter=0.0)


def model_terms(params: SimParams) -> tuple[dict[str, float], dict[str, float]]:
    """Per-category ``a_c`` (does not shrink) and ``b_c`` (data-parallel part at N=1), seconds.

    Exact for the schedule while the host runs ahead; ``straggler`` and communication are
    the overhead ``o(N)`` (see :func:`closed_form`).
    """
    p = params
    c = round(p.launch_overhead * 1e9)
    launch_end = (c - c // 4) * NS
    zg = p.zero_grad_kernels
    a = dict.fromkeys(CATEGORIES, 0.0)
    b = dict.fromkeys(CATEGORIES, 0.0)
    a["dataloader"] = p.dl_serial
    b["dataloader"] = p.dl_parallel
    a["compute"] = zg * p.fill_kernel_time + p.opt_time
    b["compute"] = p.fwd_time + p.bwd_time
    a["memcpy"] = D2H_NS * NS
    b["memcpy"] = p.h2d_time
    a["host"] = zg * (p.launch_overhead - p.fill_kernel_time) + p.host_work if zg else 0.0
    gap = launch_end if zg else launch_end + p.host_work
    a["sync"] = gap + (SYNC_RETURN_NS + ITEM_TAIL_NS) * NS + p.sync_stall
    a["reduction"] = p.reduce_time
    return a, b


def transfer_time(params: SimParams, n: int) -> list[float]:
    """Ring AllReduce seconds per bucket at N (empty at N=1)."""
    plan = make_plan(params, n, "strong")
    return [plan.transfer_ns(b, 1.0) * NS for b in range(len(plan.bucket_after))]


def _exposed(plan: Plan, bwd: float, xfer: list[float]) -> float:
    """Time the last bucket ends after backward: max_b(sum_{j>=b} X_j - backward left at b)."""
    worst = 0.0
    for b, after in enumerate(plan.bucket_after):
        left = bwd * (1 - plan.bwd_cum[after])
        worst = max(worst, sum(xfer[b:]) - left)
    return worst


def closed_form(params: SimParams, mode: str, n: int) -> dict[str, float]:
    """Step time at N by formula: ``serial``, ``parallel``, ``straggler``, ``comm``, ``total``."""
    a, b = model_terms(params)
    plan = make_plan(params, n, mode)
    div = n if mode == "strong" else 1
    slow = params.straggler_factor if plan.straggler >= 0 else 1.0
    fwd_bwd = (params.fwd_time + params.bwd_time) / div
    xfer = transfer_time(params, n)
    comm = _exposed(plan, slow * params.bwd_time / div, xfer)
    if n > 1:
        comm += params.barrier_latency
    parts = {
        "serial": sum(a.values()),
        "parallel": sum(b.values()) / div,
        "straggler": (slow - 1) * fwd_bwd,
        "comm": comm,
    }
    parts["total"] = sum(parts.values())
    return parts


def _serial_parts(params: SimParams, mode: str, world_sizes: list[int]) -> dict[str, Any]:
    """truth.json's per-category serial fraction (strong mode; weak: none, as the report)."""
    if mode != "strong":
        return {}
    t1 = true_step_time(params, mode, 1)
    parts = serial_by_category(params, max(world_sizes))
    return {
        "serial_by_category": {c: v / t1 for c, v in parts.items()},
        "serial_by_category_note": "T_inf at the largest N (parallel work divided away, "
        "transfers free, noise-free, classified by the attribution rules) per category, / T(1)",
    }


def speedup_targets(world_sizes: list[int], extra: list[int] | None = None) -> list[int]:
    """Simulated N, 2x/4x/8x/16x the largest, 32, 64, 128, 1024 and any ``extra``."""
    top = max(world_sizes)
    fixed = {2 * top, 4 * top, 8 * top, 16 * top, 32, 64, 128, 1024}
    return sorted(set(world_sizes) | fixed | set(extra or []))


#: Weak scaling: each rank's data loading and copies serve its own shard, so they grow with the
#: global batch (parallel work), whatever their fixed per-batch part; the serial share is the
#: replicated and single-rank work (optimizer, sync, reduction, host), as the analyzer counts it.
WEAK_PARALLEL = ("dataloader", "memcpy")


def serial_fraction(params: SimParams, mode: str) -> float:
    """(T(1) - parallel part at N=1) / T(1), noise-free; communication is not part of it.

    In weak mode this is Gustafson's serial share at N=1 (see :data:`WEAK_PARALLEL`).
    """
    if mode == "weak":
        return serial_share(params, mode, 1)
    t1 = true_step_time(params, mode, 1)
    _, b = model_terms(params)
    slow = params.straggler_factor if params.straggler_rank == 0 else 1.0
    parallel = sum(b.values()) + (slow - 1) * (params.fwd_time + params.bwd_time)
    return (t1 - parallel) / t1


def serial_share(params: SimParams, mode: str, n: int) -> float:
    """Share of T(N) that is serial/replicated work (Gustafson's s in weak mode)."""
    a, _ = model_terms(params)
    serial = sum(v for c, v in a.items() if mode != "weak" or c not in WEAK_PARALLEL)
    return serial / true_step_time(params, mode, n)


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def run_truth(truth: dict[int, list[attribution.StepTruth]]) -> dict[str, Any]:
    """truth.json's ``runs[N]``: means over ranks and steps, plus per-rank detail."""
    rows = [row for rank in sorted(truth) for row in truth[rank]]

    def mean_of(items: list[attribution.StepTruth], key: str) -> float:
        return _mean([getattr(r, key) * NS for r in items])

    def breakdown(items: list[attribution.StepTruth]) -> dict[str, float]:
        return {c: _mean([r.categories[c] * NS for r in items]) for c in CATEGORIES}

    per_rank = {}
    for rank in sorted(truth):
        items = truth[rank]
        per_rank[str(rank)] = {
            "step_time": mean_of(items, "duration"),
            "breakdown": breakdown(items),
            "steps": [
                {
                    "step": r.step,
                    "duration": r.duration * NS,
                    **{c: r.categories[c] * NS for c in CATEGORIES},
                }
                for r in items
            ],
        }
    bd = breakdown(rows)
    return {
        "step_time": mean_of(rows, "duration"),
        "breakdown": bd,
        "communication_exposed": bd["communication"],
        "communication_overlapped": mean_of(rows, "overlapped"),
        "communication_wait": mean_of(rows, "wait"),
        "communication_transfer": mean_of(rows, "transfer"),
        "per_rank": per_rank,
    }


def build_truth(
    params: SimParams,
    mode: str,
    seed: int,
    steps: int,
    world_sizes: list[int],
    runs: dict[int, dict[str, Any]],
    truth_at: list[int] | None = None,
) -> dict[str, Any]:
    """The whole truth.json document."""
    a, b = model_terms(params)
    targets = speedup_targets(world_sizes, truth_at)
    return {
        "pattern": "ddp",
        "mode": mode,
        "params": params_dict(params),
        "seed": seed,
        "steps": steps,
        "world_sizes": world_sizes,
        "truth_at": sorted(truth_at or []),
        "categories": list(CATEGORIES),
        "runs": {str(n): runs[n] for n in world_sizes},
        "serial_fraction": serial_fraction(params, mode),
        "serial_share": {str(n): serial_share(params, mode, n) for n in world_sizes},
        **_serial_parts(params, mode, world_sizes),
        "model": {
            "form": "t_c(N) = a_c + b_c/N + o_c(N) (weak: b_c per rank, not divided)",
            "a": a,
            "b": b,
            "comm": {
                "form": "exposed = max_b(sum_{j>=b} X_j - backward left when bucket b is ready)"
                " + barrier_latency; X = 2(N-1)alpha + 2(N-1)/N*bytes/bandwidth",
                "alpha": params.alpha,
                "bandwidth": params.bandwidth,
                "bucket_bytes": [4 * e for e in make_plan(params, 2, mode).bucket_nelems],
                "bucket_ready_fraction": [
                    make_plan(params, 2, mode).bwd_cum[k]
                    for k in make_plan(params, 2, mode).bucket_after
                ],
                "barrier_latency": params.barrier_latency,
            },
            "straggler": {"rank": params.straggler_rank, "factor": params.straggler_factor},
            "step_time": {str(n): true_step_time(params, mode, n) for n in targets},
            "breakdown": {str(n): true_breakdown(params, mode, n) for n in world_sizes},
        },
        "speedup": {str(n): true_speedup(params, mode, n) for n in targets},
    }


def _at_infinity(params: SimParams) -> SimParams:
    """The step at infinite N: parallel work divided away, transfers free, no jitter; every
    launch, the serial work and the rank-0 reduction the others wait for stay."""
    return dataclasses.replace(
        params,
        jitter=0.0,
        dl_parallel=0.0,
        h2d_time=0.0,
        fwd_time=0.0,
        bwd_time=0.0,
        alpha=0.0,
        bandwidth=1e30,
        barrier_latency=0.0,
    )


def serial_by_category(params: SimParams, n: int) -> dict[str, float]:
    """Seconds per category of T_inf (strong mode): the noise-free step of ``n`` ranks with the
    parallel work divided away and transfers free, classified by the attribution rules (waits
    by their cause) and averaged over the ranks. Divided by T(1), each is the category's part
    of the serial fraction; they sum to T_inf / T(1)."""
    return dict(true_breakdown(_at_infinity(params), "strong", max(n, 1)))
