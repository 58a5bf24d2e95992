"""Frozen results of the scaling stage and their JSON form (the contract's ``"scaling"`` object).

Every number leaves through :func:`clean`, so ``to_dict()`` holds only plain ``float``/``int``/
``str``/``bool``/``None`` (no numpy scalars; NaN and infinities become ``None``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tracescale.scaling.blocks import MAX_RESAMPLED, blocks_note


def clean(x: Any) -> Any:
    """Plain JSON types: numpy scalars to Python, NaN/inf to None, recursively."""
    if isinstance(x, Mapping):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [clean(v) for v in x]
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if hasattr(x, "item") and not isinstance(x, int | float):
        x = x.item()
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return float(x) if math.isfinite(x) else None
    return x


def clean_dict(d: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`clean` for a mapping, typed."""
    return {str(k): clean(v) for k, v in d.items()}


@dataclass(frozen=True)
class RankStats:
    rank: int
    mean: float
    median: float
    p10: float
    p90: float
    steps: int


@dataclass(frozen=True)
class StepStats:
    """Step-time statistics of one run (seconds); ``cv`` over run-level per-step times."""

    world_size: int
    n_ranks: int
    n_steps: int
    mean: float
    median: float
    p10: float
    p90: float
    cv: float
    slowest_rank: int
    slowest_rank_mean: float
    slowest_per_step_mean: float
    per_rank: tuple[RankStats, ...]

    def to_dict(self) -> dict[str, Any]:
        return clean_dict(
            {
                "world_size": self.world_size,
                "ranks": self.n_ranks,
                "steps": self.n_steps,
                "mean": self.mean,
                "median": self.median,
                "p10": self.p10,
                "p90": self.p90,
                "cv": self.cv,
                "slowest_rank": {"rank": self.slowest_rank, "mean": self.slowest_rank_mean},
                "slowest_per_step_mean": self.slowest_per_step_mean,
                "per_rank": [
                    {
                        "rank": r.rank,
                        "mean": r.mean,
                        "median": r.median,
                        "p10": r.p10,
                        "p90": r.p90,
                        "steps": r.steps,
                    }
                    for r in self.per_rank
                ],
            }
        )


@dataclass(frozen=True)
class ScalingPoint:
    """One measured world size. ``karp_flatt_by_category`` sums to ``karp_flatt``.

    ``karp_flatt`` is the experimentally determined serial fraction, so it is set only where
    it is one: from at least two measured runs and inside [0, 1]. ``karp_flatt_raw`` keeps the
    formula's value wherever it is defined: above 1 the job got slower than the baseline,
    below 0 it sped up more than N (superlinear), and neither is a fraction of anything.
    """

    world_size: int
    step_time_s: float
    slowest_rank_step_time_s: float
    speedup: float
    efficiency: float
    karp_flatt: float | None
    karp_flatt_estimated: bool
    karp_flatt_by_category: Mapping[str, float] | None
    gustafson_speedup: float | None = None
    serial_share: float | None = None
    karp_flatt_raw: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "world_size": self.world_size,
            "speedup": self.speedup,
            "efficiency": self.efficiency,
            "karp_flatt": self.karp_flatt,
            "karp_flatt_raw": self.karp_flatt_raw,
            "karp_flatt_estimated": self.karp_flatt_estimated,
            "karp_flatt_by_category": self.karp_flatt_by_category,
            "step_time_s": self.step_time_s,
            "slowest_rank_step_time_s": self.slowest_rank_step_time_s,
        }
        if self.gustafson_speedup is not None:
            d["gustafson_speedup"] = self.gustafson_speedup
        if self.serial_share is not None:
            d["serial_share"] = self.serial_share
        return clean_dict(d)


@dataclass(frozen=True)
class SerialFraction:
    """Strong: ``sum a_c / T(1)``; weak: serial-category share of the baseline step."""

    total: float
    ci90: tuple[float, float]
    by_category: Mapping[str, float]
    t1_s: float
    t1_estimated: bool

    def to_dict(self) -> dict[str, Any]:
        return clean_dict(
            {
                "total": self.total,
                "ci90": list(self.ci90),
                "by_category": dict(self.by_category),
                "t1_s": self.t1_s,
                "t1_estimated": self.t1_estimated,
            }
        )


@dataclass(frozen=True)
class ModelInfo:
    """A category's chosen form for the report (communication carries sub-models)."""

    form: str
    params: Mapping[str, float]
    rmse_s: float
    cv_error: float | None
    candidates: Mapping[str, float]
    n_points: int
    assumed: bool
    parts: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "form": self.form,
            "params": dict(self.params),
            "rmse_s": self.rmse_s,
            "cv_error": self.cv_error,
            "candidates": dict(self.candidates),
            "n_points": self.n_points,
            "assumed": self.assumed,
        }
        d.update(self.parts)
        return clean_dict(d)


@dataclass(frozen=True)
class Projection:
    """Modelled step at a world size; ``ci90`` is the step time's bootstrap 90% interval."""

    world_size: int
    step_time_s: float
    speedup: float
    efficiency: float
    ci90: tuple[float, float]
    speedup_ci90: tuple[float, float]
    breakdown_s: Mapping[str, float]
    extrapolation: float  # world_size / largest measured N
    gustafson_speedup: float | None = None
    speedup_vs_measured: float | None = None  # what-if: over the measured (unchanged) baseline

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "world_size": self.world_size,
            "step_time_s": self.step_time_s,
            "speedup": self.speedup,
            "efficiency": self.efficiency,
            "ci90": list(self.ci90),
            "speedup_ci90": list(self.speedup_ci90),
            "breakdown_s": dict(self.breakdown_s),
            "extrapolation": self.extrapolation,
        }
        if self.gustafson_speedup is not None:
            d["gustafson_speedup"] = self.gustafson_speedup
        if self.speedup_vs_measured is not None:
            d["speedup_vs_measured"] = self.speedup_vs_measured
        return clean_dict(d)


@dataclass(frozen=True)
class Overhead:
    """Time an overhead term adds per step at a world size (not part of the serial fraction)."""

    world_size: int
    category: str
    source: str  # collective type, "other communication", or the category's growth term
    seconds: float
    text: str

    def to_dict(self) -> dict[str, Any]:
        return clean_dict(
            {
                "world_size": self.world_size,
                "category": self.category,
                "source": self.source,
                "seconds": self.seconds,
                "text": self.text,
            }
        )


@dataclass(frozen=True)
class WhatIf:
    """A scenario: categories scaled before fitting, re-projected."""

    scenario: str
    factors: Mapping[str, float]
    serial_fraction: float | None  # None: the scenario was refused (the graph cannot express it)
    amdahl_limit: float | None
    optimal_world_size: int | None
    projections: tuple[Projection, ...]

    def to_dict(self) -> dict[str, Any]:
        return clean_dict(
            {
                "scenario": self.scenario,
                "factors": dict(self.factors),
                "serial_fraction": self.serial_fraction,
                "amdahl_limit": self.amdahl_limit,
                "optimal_world_size": self.optimal_world_size,
                "projections": [p.to_dict() for p in self.projections],
            }
        )


@dataclass(frozen=True)
class ScalingResult:
    """Everything the scaling stage found; ``to_dict()`` is the contract's ``"scaling"``."""

    mode: str
    mode_reason: str
    baseline_world_size: int
    assumed: bool
    assumptions: Mapping[str, str]
    step_stats: tuple[StepStats, ...]
    points: tuple[ScalingPoint, ...]
    serial_fraction: SerialFraction
    amdahl_limit: float | None
    optimal_world_size: int | None
    models: Mapping[str, ModelInfo]
    projections: tuple[Projection, ...]
    curve: tuple[Projection, ...]
    overheads: tuple[Overhead, ...]
    what_if: tuple[WhatIf, ...]
    warnings: tuple[str, ...]
    seed: int
    n_boot: int
    #: Most steps of one run: beyond ``blocks.MAX_RESAMPLED`` the bootstrap resampled that many
    #: blocks of consecutive steps, and the JSON says so beside the replicates.
    max_steps: int = 0

    def to_dict(self) -> dict[str, Any]:
        return clean_dict(
            {
                "baseline_world_size": self.baseline_world_size,
                "assumed": self.assumed,
                "points": [p.to_dict() for p in self.points],
                "serial_fraction": self.serial_fraction.to_dict(),
                "amdahl_limit": self.amdahl_limit,
                "optimal_world_size": self.optimal_world_size,
                "models": {k: v.to_dict() for k, v in self.models.items()},
                "projections": [p.to_dict() for p in self.projections],
                "what_if": [w.to_dict() for w in self.what_if],
                "mode": self.mode,
                "mode_reason": self.mode_reason,
                "assumptions": dict(self.assumptions),
                "step_stats": [s.to_dict() for s in self.step_stats],
                "curve": [p.to_dict() for p in self.curve],
                "overheads": [o.to_dict() for o in self.overheads],
                "warnings": list(self.warnings),
                "bootstrap": {"seed": self.seed, "replicates": self.n_boot, **self._blocks()},
            }
        )

    def _blocks(self) -> dict[str, Any]:
        note = blocks_note(self.max_steps)
        return {} if note is None else {"step_blocks": MAX_RESAMPLED, "note": note}


def _projection_from(p: Projection, d: Mapping[str, Any]) -> Projection:
    return replace(
        p,
        step_time_s=float(d["step_time_s"]),
        speedup=float(d["speedup"]),
        efficiency=float(d["efficiency"]),
        ci90=(float(d["ci90"][0]), float(d["ci90"][1])),
        speedup_ci90=(float(d["speedup_ci90"][0]), float(d["speedup_ci90"][1])),
        # the dense curve has no categories (nothing draws them)
        breakdown_s={str(k): float(v) for k, v in dict(d.get("breakdown_s") or {}).items()},
    )


def synced_with(result: ScalingResult, doc: Mapping[str, Any]) -> ScalingResult:
    """``result`` with what a later stage (the replay) rewrote in its ``"scaling"`` document:
    the serial fraction, the Amdahl limit, the optimum and the projected points. The typed
    result a caller gets never disagrees with the JSON it is saved as."""
    sf = doc["serial_fraction"]
    serial = replace(
        result.serial_fraction,
        total=float(sf["total"]),
        ci90=(float(sf["ci90"][0]), float(sf["ci90"][1])),
        by_category={str(k): float(v) for k, v in sf["by_category"].items()},
        t1_s=float(sf.get("t1_s", result.serial_fraction.t1_s)),
    )
    by_n = {int(d["world_size"]): d for d in doc.get("projections", [])}
    curve_n = {int(d["world_size"]): d for d in doc.get("curve", [])}
    scenarios = {str(d.get("scenario")): d for d in doc.get("what_if", [])}
    return replace(
        result,
        what_if=tuple(
            _what_if_from(w, scenarios[w.scenario]) if w.scenario in scenarios else w
            for w in result.what_if
        ),
        serial_fraction=serial,
        amdahl_limit=doc.get("amdahl_limit"),
        optimal_world_size=doc.get("optimal_world_size"),
        projections=tuple(
            _projection_from(p, by_n[p.world_size]) if p.world_size in by_n else p
            for p in result.projections
        ),
        curve=tuple(
            _projection_from(p, curve_n[p.world_size]) if p.world_size in curve_n else p
            for p in result.curve
        ),
    )


def _what_if_from(w: WhatIf, d: Mapping[str, Any]) -> WhatIf:
    """A scenario as the replay rewrote it: its serial fraction and projections, or none
    where it was refused."""
    by_n = {int(p["world_size"]): p for p in d.get("projections", [])}
    sf = d.get("serial_fraction")
    return replace(
        w,
        serial_fraction=None if sf is None else float(sf),
        amdahl_limit=d.get("amdahl_limit"),
        optimal_world_size=d.get("optimal_world_size"),
        projections=tuple(
            _projection_from(p, by_n[p.world_size]) for p in w.projections if p.world_size in by_n
        ),
    )
