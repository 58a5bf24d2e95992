"""Analyze a study and keep the ReplayStudy the pipeline fitted (its laws, p2p law, delays):
tests that pin the replay's internals read them from the same analyze a user runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tracescale.api import analyze
from tracescale.replay import fit
from tracescale.replay.project import ReplayStudy


def analyze_keeping_replay(where: Path, targets: list[int]) -> tuple[dict[str, Any], ReplayStudy]:
    """The study entry and its fitted replay (the last fit: the first is its validation)."""
    got: list[ReplayStudy] = []
    fit_replay = fit.fit_replay

    def keep(*a: Any, **k: Any) -> ReplayStudy:
        s = fit_replay(*a, **k)
        got.append(s)
        return s

    mp = pytest.MonkeyPatch()
    mp.setattr(fit, "fit_replay", keep)
    try:
        entry = analyze(where, project=targets, jobs=1, no_cache=True).studies[0]
    finally:
        mp.undo()
    return entry, got[-1]
