"""The small pipeline-parallel study that several modules read (projections, the bubble, the
attribution at the measured N, the serial fraction's parts): built and analyzed once per test
process by tests/conftest.py's ``pipeline_study`` fixture, whose tests one worker takes whole
(``SHARED_STUDY`` there)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.independent.pipeline import PipePattern, build_study
from tests.replay_capture import analyze_keeping_replay

#: The smallest study that shows it: 4 stages measured at DP = 1, 2, 4 (N = 4, 8, 16), 32
#: microbatches per step (M / DP per replica), 3 steps; projected to DP = 8, 16, 32. The truth's
#: mean step over 8 steps, not 24: it moves the projections' errors by under a point (1F1B:
#: +1.3/+0.9/-0.1% against +0.4/-0.1/-1.1%; interleaved: +3.2/+6.5/+8.6% against
#: +2.3/+6.0/+7.9%, bounds 10/10/15%) and the bubble's by 0.05 points of 2, at a third the time.
SMALL = replace(
    PipePattern(),
    microbatches=32,
    dp_sizes=(1, 2, 4),
    dp_targets=(8, 16, 32),
    steps=3,
    truth_steps=8,
)

#: The seed every module reads the study with.
SEED = 1


def build_and_analyze(where: Path, virtual: int) -> tuple[PipePattern, dict[str, Any], Any, Any]:
    """(pattern, study entry projected to its targets, truth, the fitted ReplayStudy) of SMALL
    with ``virtual`` model chunks per rank (1: plain 1F1B, 2: interleaved). The entry's runs
    and serial fraction are those of an analysis without targets."""
    pat = replace(SMALL, virtual=virtual)
    truth = build_study(pat, str(where), seed=SEED)
    entry, replayed = analyze_keeping_replay(where, list(pat.targets))
    return pat, entry, truth, replayed
