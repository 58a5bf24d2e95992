"""Small simulated studies written as measured runs only (no truth, so no expectation runs),
and a spy on the arrival offsets the replay reads: shared by the tests of how a collective's
arrivals are read (positions, pipeline chains, accumulation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tracescale.replay.arrivals import variability
from tracescale.simulate import pattern_params
from tracescale.simulate.pattern_run import write_run
from tracescale.simulate.runner import run
from tracescale.simulate.spec import parse_pattern


def write_measured_runs(
    root: Path, pattern: str, sizes: tuple[int, ...], steps: int, seed: int,
    overrides: dict[str, float] | None = None,
) -> None:  # fmt: skip
    """``pattern`` simulated at each of ``sizes`` (strong scaling) into ``root/ws<N>``."""
    spec = parse_pattern(pattern)
    params = pattern_params(spec, overrides)
    for n in sizes:
        e = run(spec, params, n, "strong", steps, seed, record=True)
        write_run(e, params, root / f"ws{n}", 1, 1, lambda _: None)


def record_arrival_offsets(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every ``(table, pools)`` ``variability.arrival_offsets`` returns from now on (the
    engine looks it up on the module at call time, so the spy is seen there)."""
    seen: list[Any] = []
    real = variability.arrival_offsets

    def keep(run_: Any, rank: int) -> Any:
        got = real(run_, rank)
        seen.append(got)
        return got

    monkeypatch.setattr(variability, "arrival_offsets", keep)
    return seen
