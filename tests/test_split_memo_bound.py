"""The projection's per-node duration arrays are memoized per world size, bounded in bytes:
each entry holds four arrays per node, and every lever's scenario study keeps its own, so on
a large rank (1.4M nodes, 200 MB of JSON) eight entries in each of six studies were 1.2 GB of
a 1.7 GB analyze. A graph whose entries pass the byte bound keeps only the latest, and a
recomputed entry is the same array."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.replay_capture import analyze_keeping_replay
from tracescale.replay import project
from tracescale.simulate import make_params, simulate


def _entries(study: project.ReplayStudy, kind: str) -> int:
    return sum(1 for k in study._memo if k[0] == kind)


def test_entries_past_the_byte_bound_keep_only_the_latest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    simulate([1, 2], tmp_path, steps=5, seed=1, params=make_params({"layers": 2}),
             compresslevel=1)  # fmt: skip
    _, study = analyze_keeping_replay(tmp_path, [4])
    small = len(study.base.graph) * project.ENTRY_BYTES_PER_NODE * 3  # three entries
    first = np.array(study.split_durations(3)[0])
    for n in (5, 6, 7):
        study.split_durations(n)
    assert _entries(study, "split") >= 4  # a small graph: every asked entry kept
    monkeypatch.setattr(project, "SPLIT_BYTES", small)
    for n in (9, 10, 11, 12):
        study.split_durations(n)
    assert _entries(study, "split") == 3 and _entries(study, "late") == 3
    monkeypatch.setattr(project, "SPLIT_BYTES", 1)
    again = study.split_durations(3)[0]
    assert _entries(study, "split") == 1 and _entries(study, "late") == 1
    assert np.array_equal(again, first)


def test_the_same_inputs_replay_once_and_past_the_bound_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two variants whose durations, waits and carried lateness are equal (an interval's end
    that changes nothing) share one replay; a graph past the byte bound keeps no replay."""
    simulate([1, 2], tmp_path, steps=5, seed=1, params=make_params({"layers": 2}),
             compresslevel=1)  # fmt: skip
    _, study = analyze_keeping_replay(tmp_path, [4])
    calls: list[int] = []
    real = project.replay_late

    def counted(*args: object) -> object:
        calls.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(project, "replay_late", counted)
    point = study.replay_at(6)
    assert len(calls) == 1
    # the same inputs under another key: the step's arrays are equal, the replay is shared
    study._memo[("split", 6, False, False, 9, 0)] = study._memo[("split", 6, False, False, 0, 0)]
    study._memo[("late", 6, False, False, 9, 0)] = study._memo[("late", 6, False, False, 0, 0)]
    assert study.replay_at(6, comm_end=9) is point and len(calls) == 1
    # different inputs replay
    other = study.replay_at(7)
    assert len(calls) == 2 and not np.array_equal(other.end, point.end)
    monkeypatch.setattr(project, "SPLIT_BYTES", 1)
    study.replay_at(6, alt=True)
    study.replay_at(6, alt=True)
    assert len(calls) == 4  # nothing kept: each asks again
