"""Expert parallelism (MoE) and ZeRO-2 without any stream-wait record: the compute stream's
kernels just start a little after the collective they waited for ends (tests/independent/moe.py).

Each study meets the targets of tests/test_independent_studies.py and its serial fraction is
its truth's (tests/independent/serial.py); the rule that links such kernels to the collective
is pinned on an exact hand-written case.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from tests.independent.gen import build_study
from tests.independent.serial import serial_by_category
from tests.independent.targets import assert_meets_targets
from tests.independent.variants import VARIANTS
from tracescale.api import analyze
from tracescale.replay.graph.device import launch_lags


@pytest.fixture(scope="module", params=["moe/no-waits", "zero2/no-waits"])
def study(request: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, ...]:
    p = replace(VARIANTS[request.param](), layers=4, steps=4)
    where = tmp_path_factory.mktemp(request.param.replace("/", "_"))
    truth = build_study(p, str(where))
    entry = analyze(where, project=list(p.targets), jobs=1, no_cache=True).studies[0]
    return p, truth, entry


def test_projection_meets_targets(study: tuple[Any, ...]) -> None:
    p, truth, entry = study
    assert_meets_targets(entry, truth, p.targets)


def test_serial_fraction_is_the_truths(study: tuple[Any, ...]) -> None:
    """Kept as launch latencies, the waits doubled MoE's serial fraction and made ZeRO-2's 9x."""
    p, _, entry = study
    want = sum(serial_by_category(p).values())
    assert entry["scaling"]["serial_fraction"]["total"] == pytest.approx(want, rel=0.15)


US = 1000


def test_kernel_held_by_a_collective_waits_for_it() -> None:
    """Stream 1 runs four idle kernels launched 5 us before they start (the typical latency);
    a collective on stream 2 ends at 80 us. A kernel launched at 67 us starts at 82 us: its
    launch lag (15 us) is under the 2 x 5 + 10 us that shows a wait by itself, but it was
    ready by 72 us and started 2 us after the collective's end: it waited for the collective,
    and keeps only the typical latency. The same 15 us lag 2 us after a plain kernel's end
    (stream 3), or 7 us after a collective's end, names no producer: its lag stays. A kernel
    with a recorded producer that starts 3 us after it ended was held by it (latency 5 us)."""
    # node: 0 host; 1-3 stream 1; 4 collective; 5 (a); 6 plain kernel; 7 (b); 8 collective;
    # 9 (c); 10 plain kernel; 11 (d), producer 10
    start = [0, 5, 20, 35, 50, 82, 100, 122, 140, 177, 200, 250]
    dur = [300, 2, 2, 2, 30, 10, 20, 10, 30, 10, 47, 5]
    lag = [0, 5, 5, 5, 5, 15, 5, 15, 5, 15, 5, 40]
    c = {
        "start": np.array(start, dtype=np.int64) * US,
        "dur": np.array(dur, dtype=np.int64) * US,
        "lag": np.array(lag, dtype=np.int64) * US,
        "res": np.array([0, 1, 1, 1, 2, 1, 3, 1, 2, 1, 3, 1], dtype=np.int64),
        "dep": np.array([-1] + [0] * 11, dtype=np.int64),
        "dep2": np.array([-1] * 11 + [10], dtype=np.int64),
        "coll": np.array([-1, -1, -1, -1, 0, -1, -1, -1, 1, -1, -1, -1], dtype=np.int64),
    }
    dev = np.arange(12) > 0
    got = launch_lags(c, dev)
    assert c["dep2"].tolist() == [-1, -1, -1, -1, -1, 4, -1, -1, -1, -1, -1, 10]
    assert (got // US).tolist() == [0, 5, 5, 5, 5, 5, 5, 15, 5, 15, 5, 5]
