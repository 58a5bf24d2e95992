"""The work of an analyze is linear in the events, whatever their shape: the same units of work
spread over many GPU streams, many steps or many process groups cost at most 3x what they cost
in the common shape (a few steps, one stream, one group). Measured in this process's CPU time
(``jobs=1``, no cache), so other processes on the machine do not move the ratio.

The sizes are where the former searches clearly failed the ratio (measured against the code
before they were made linear): 10,000 streams cost 4.0x one stream (the replay searched every
other stream's kernels once per stream), 12,000 steps 4.7x four steps (the longest host gap
of each step was a scan of every node, the GPU measures eight numpy calls a step); now 1.0x
and 2.1x. Process groups cost 1.05x, before and after.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.linear_work_traces import write_study
from tracescale.api import analyze

#: Most a shape may cost over the common shape of the same units.
MAX_RATIO = 3.0


def _cpu_seconds(path: Path) -> float:
    t = time.process_time()
    analyze(path, jobs=1, no_cache=True, progress=False)
    return time.process_time() - t


def _ratio(tmp_path: Path, units: int, common: dict[str, int], spread: dict[str, int]) -> float:
    """CPU time of ``spread`` over ``common``, after a warm-up analyze of the common shape
    (imports, the compiled replay loop)."""
    base = write_study(tmp_path / "common", units, **common)
    other = write_study(tmp_path / "spread", units, **spread)
    _cpu_seconds(base)
    return _cpu_seconds(other) / _cpu_seconds(base)


def test_many_streams_cost_what_one_stream_costs(tmp_path: Path) -> None:
    r = _ratio(tmp_path, 10_000, {}, {"streams": 10_000})
    assert r <= MAX_RATIO, f"10,000 streams cost {r:.1f}x one stream"


def test_many_steps_cost_what_few_steps_cost(tmp_path: Path) -> None:
    r = _ratio(tmp_path, 12_000, {}, {"steps": 12_000})
    assert r <= MAX_RATIO, f"12,000 steps cost {r:.1f}x 4 steps"


def test_many_process_groups_cost_what_one_group_costs(tmp_path: Path) -> None:
    r = _ratio(tmp_path, 600, {"groups": 1}, {"groups": 600})
    assert r <= MAX_RATIO, f"600 process groups cost {r:.1f}x one group"
