"""Pattern studies: (pattern, params, world sizes) in, rank traces and truth.json out.

The truth comes from the engine's own schedule only. Per measured N: the attribution of the
traced schedule (jitter included), as for the default study. At any N (measured or a
projection target): the expected step time of the noise-free schedule, simulated with every
rank and averaged over many independent replicas when ranks draw random delays, so that the
expected slowest rank (E[max of N draws]) is what the truth holds. Replicas start aligned at a
cycle boundary (one optimizer step), where every rank has left the same ``loss.item()``. The
runs themselves are :mod:`~tracescale.simulate.runner`'s, the pattern-specific truth fields
:mod:`~tracescale.simulate.extras`'.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tracescale.categories import CATEGORIES
from tracescale.simulate import attribution, extras
from tracescale.simulate.cuda_graph import engine_class
from tracescale.simulate.engine import Engine, Template
from tracescale.simulate.events import Emitter, Event
from tracescale.simulate.params import SimParams, params_dict
from tracescale.simulate.runner import expected_step, one_step, run
from tracescale.simulate.schedule import T0_NS
from tracescale.simulate.spec import PatternSpec
from tracescale.simulate.truth import run_truth
from tracescale.simulate.writer import (
    atomic_write,
    file_name,
    rank_pid,
    trace_document,
    write_trace,
)

Progress = Callable[[str], None]


def host_of(params: SimParams, rank: int) -> str:
    return f"simnode{rank // params.gpus_per_node}"


#: Patterns whose optimizer shard depends on N apart from the batch (ZeRO over every rank,
#: HSDP over a node): the step at N=1 with the batch divided away still runs the whole
#: optimizer, so T_inf is read at the largest N instead.
SHARDED_OPTIMIZER = ("zero2", "hsdp")


def serial_by_category(spec: PatternSpec, params: SimParams, n: int, seed: int) -> dict[str, float]:
    """Seconds per category of T_inf (strong mode): one cycle of ``n`` ranks with the parallel
    work divided away (``div`` infinite), transfers free and no jitter, every launch and the
    serial work kept, classified by the attribution rules (waits by their cause) and averaged
    over ranks and steps. A random per-rank delay (heavy_tail) is kept at its mean on every
    rank: its mean is serial (no N divides it away), while the slowest of N ranks' excess over
    it grows with N, an overhead at each N like a collective's transfer, not serial work."""
    quiet = dataclasses.replace(params, jitter=0.0)
    if spec.base == "zero2":  # the optimizer runs on a 1/N shard: parallel work, divided away
        quiet = dataclasses.replace(quiet, opt_time=0.0)
    if spec.has("heavy_tail") and quiet.tail_median > 0:
        mean = quiet.tail_median * math.exp(quiet.tail_sigma**2 / 2)  # lognormal's mean
        quiet = dataclasses.replace(quiet, tail_median=0.0, dl_serial=quiet.dl_serial + mean)
    e = engine_class(spec.has("cuda_graph"))(
        quiet, n, math.inf, 1, np.random.default_rng([seed, n, 11]), True,
        legacy_nccl=spec.has("multinode"),
    )  # fmt: skip
    e.free_transfers = True
    for k in range(spec.cycle(quiet.accum_steps)):
        one_step(e, spec, k, "strong")
    rows = [t for per_rank in attribution.resolve(e.records).values() for t in per_rank]
    return {c: math.fsum(t.categories[c] for t in rows) * 1e-9 / len(rows) for c in CATEGORIES}


def _rank_events(
    templates: list[Template], ts: list[float], dur: list[float], r: int, pid: int, device: int
) -> list[Event]:
    """Rank ``r``'s events from the shared templates and its own µs times."""
    out: list[Event] = []
    for t, a, d in zip(templates, ts, dur, strict=True):
        if t.ranks is not None and not t.ranks[r]:
            continue
        args = t.args if t.per_rank is None else {**t.args, **t.per_rank[r]}
        if t.gpu:
            if t.cat != "cuda_sync" and d <= 0:
                continue
            out.append({"ph": "X", "cat": t.cat, "name": t.name, "pid": device, "tid": t.stream,
                        "ts": a, "dur": d, "args": {**args, "device": device}})  # fmt: skip
        else:
            out.append({"ph": "X", "cat": t.cat, "name": t.name, "pid": pid, "tid": pid,
                        "ts": a, "dur": d, "args": args})  # fmt: skip
    return out


def write_run(
    e: Engine, params: SimParams, folder: Path, seed: int, level: int, progress: Progress
) -> None:
    """One gzip Kineto file per rank, named ``simnode{k}_{pid}...`` after the rank's node."""
    folder.mkdir(parents=True, exist_ok=True)
    names = {file_name(r, host_of(params, r)) for r in range(e.n)}
    for old in folder.glob("sim*.pt.trace.json.gz"):
        if old.name not in names:
            old.unlink()
    gpn = params.gpus_per_node
    starts = np.stack([t.start for t in e.events])  # (events, ranks) ns from the first step
    ends = np.stack([t.end for t in e.events])
    ts_us = (starts + T0_NS) / 1000  # exact: integer ns < 2**53, one correctly rounded division
    dur_us = (ends - starts) / 1000
    for r in range(e.n):
        device, pid = r % gpn, rank_pid(r)
        events = _rank_events(e.events, ts_us[:, r].tolist(), dur_us[:, r].tolist(), r, pid, device)
        meta = Emitter(rank=r, pid=pid, device=device, enabled=True).metadata(T0_NS)
        host = host_of(params, r)
        doc = trace_document(events, meta, rank=r, world_size=e.n, device=device, seed=seed,
                             host=host, node_gpus=gpn,
                             nccl_version="2.17.1" if e.legacy_nccl else "2.21.5",
                             pgs=[pg for g in e.groups for pg in g.pg_config(r)])  # fmt: skip
        write_trace(folder / file_name(r, host), doc, level)
        if e.n >= 8 and (r + 1) % 8 == 0:
            progress(f"  N={e.n}: wrote {r + 1}/{e.n} rank files")


def simulate_pattern(
    spec: PatternSpec,
    world_sizes: list[int],
    out: Path,
    *,
    params: SimParams,
    mode: str,
    steps: int,
    seed: int,
    truth_at: list[int],
    compresslevel: int,
    progress: Progress,
) -> dict[str, Any]:
    """Write ``out/ws{N}/`` for every N and ``out/truth.json``; returns the truth document."""
    base = extras.baseline(spec, params)
    extras.check_sizes(spec, params, mode, sorted(set(world_sizes) | set(truth_at) | {base}))
    runs: dict[int, dict[str, Any]] = {}
    for n in world_sizes:
        progress(f"simulating {spec.name} N={n} ({steps} steps)")
        e = run(spec, params, n, mode, steps, seed, record=True)
        runs[n] = run_truth(attribution.resolve(e.records))
        runs[n].update(extras.run_extras(spec, params, mode, seed, steps, e))
        write_run(e, params, out / f"ws{n}", seed, compresslevel, progress)
    expected: dict[int, float] = {}
    replicas: dict[int, int] = {}
    for n in sorted(set(world_sizes) | set(truth_at) | {base}):
        progress(f"truth of {spec.name} at N={n}")
        expected[n], replicas[n] = expected_step(spec, params, mode, n, seed)
    if spec.base == "pp":
        t_inf, t1, pp_parts = extras.pp_serial(spec, params, seed)
        parts = pp_parts if mode == "strong" else {}
    else:
        t_inf, _ = expected_step(spec, params, mode, 1, seed, div=math.inf)
        t1 = expected[1]
        parts = serial_by_category(spec, params, max(world_sizes), seed) if mode == "strong" else {}
        if parts and spec.base in SHARDED_OPTIMIZER:
            # one rank holds the whole optimizer: T_inf is the parts' step at the largest N
            t_inf = math.fsum(parts.values())
    more = extras.model_extras(spec, params, mode, sorted(expected), seed, expected)

    def speedup(n: int) -> float:
        ratio = expected[base] / expected[n]
        return ratio * n / base if mode == "weak" else ratio

    truth = {
        "pattern": spec.name,
        "mode": mode,
        "params": params_dict(params),
        "seed": seed,
        "steps": steps,
        "world_sizes": world_sizes,
        "truth_at": sorted(truth_at),
        "categories": list(CATEGORIES),
        "gpus_per_node": params.gpus_per_node,
        "runs": {str(n): runs[n] for n in world_sizes},
        "serial_fraction": t_inf / t1,
        **(
            {
                "serial_by_category": {c: v / t1 for c, v in parts.items()},
                "serial_by_category_note": "T_inf at the largest N (parallel work divided "
                "away, transfers free, noise-free, classified by the attribution rules) per "
                "category, / T(1)",
            }
            if parts
            else {}
        ),
        "model": {
            "form": "expected ProfilerStep time of the noise-free event schedule over one cycle "
            "of steps, every rank simulated; random per-rank delays averaged over replicas",
            "cycle_steps": spec.cycle(params.accum_steps),
            "step_time": {str(n): expected[n] for n in sorted(expected)},
            "replicas": {str(n): replicas[n] for n in sorted(replicas)},
            "step_time_infinite_n": t_inf,
            **more,
        },
        "speedup_baseline": base,
        "speedup": {str(n): speedup(n) for n in sorted(expected)},
    }
    atomic_write(out / "truth.json", (json.dumps(truth, indent=1) + "\n").encode())
    return truth
