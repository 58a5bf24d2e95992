"""Pipeline parallel (1F1B, 4 stages x DP replicas, fixed global batch; plain and interleaved
with two model chunks per rank): projections and the pipeline bubble against the exact truth
of tests/independent/pipeline.py, and the chunks' reading (``replay.laws.interleave``).

With M microbatches per step over DP replicas, each stage runs M / DP microbatches of fixed
size: compute per step shrinks as 1/N, the pipeline's fill and drain does not. Fitting each
kernel group's time per step as a law in N shrank the measured microbatches instead and lost
the bubble's growth (-13/-22/-27% at 2x/4x/8x); the p2p nodes' own law (``replay.laws.p2p``)
keeps it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.independent.pipeline import (
    build_study,
    interleaved,
    one_f_one_b,
    schedule_table,
)
from tests.independent.targets import assert_meets_targets
from tests.minitrace import MiniTrace
from tests.pipeline_studies import SMALL
from tracescale.cli.pipeline_chunks import run_chunks, trace_chunks
from tracescale.ingest.decode import load_trace
from tracescale.replay.laws.interleave import chunk_passes, chunk_reading, starved_chunks
from tracescale.replay.laws.nodes import fit_law
from tracescale.replay.laws.p2p import p2p_law, p2p_rows
from tracescale.replay.serial_parts import BUBBLE


@pytest.fixture(scope="module")
def study(pipeline_study: Any) -> tuple[dict[str, Any], Any, Any]:
    """(study entry, truth, the fitted ReplayStudy), built and analyzed once per session
    (tests/pipeline_studies.py; the attribution and serial-fraction modules read it too)."""
    _, entry, truth, replayed = pipeline_study(1)
    return entry, truth, replayed


def test_pipeline_projection_meets_targets(study: tuple[dict[str, Any], Any, Any]) -> None:
    entry, truth, _ = study
    assert_meets_targets(entry, truth, SMALL.targets)
    for run in entry["runs"]:
        assert run["replay_error"] <= 0.01


def test_bubble_part_is_the_truths_fill_and_drain(study: tuple[dict[str, Any], Any, Any]) -> None:
    """The serial fraction's ``pipeline_bubble``: the replay's p2p-only time at infinite N (the
    1F1B fill and drain rebuilt, ``laws.p2p.rebuilt_bubble``), within 2 points of T(1) of the
    truth's constant bubble of the replayed rank's stage (a + b/N fit over N of the time its
    GPU runs only p2p kernels; the schedule-rebuilt truth is tests/independent/serial_pipeline.py,
    checked in tests/test_serial_fraction_modern.py); the parts still sum to T_inf."""
    entry, truth, rs = study
    parts = rs.serial_parts()
    t1 = entry["scaling"]["serial_fraction"]["t1_s"]
    stage = rs.base.rank // (rs.base.world_size // SMALL.stages)
    n = np.array([float(k) for k in truth["bubble_by_stage_s"]])
    b = np.array([v[stage] for v in truth["bubble_by_stage_s"].values()])
    a_true = np.linalg.lstsq(np.column_stack([np.ones_like(n), 1 / n]), b, rcond=None)[0][0]
    assert a_true > 0.01 * t1  # the case shows a bubble at all
    assert abs(parts[BUBBLE] - a_true) / t1 <= 0.02, (parts[BUBBLE], a_true, t1)
    # a lost bubble fails (the p2p law's limit gave 3.1 ms against 4.3 ms; the rebuilt fill
    # and drain 3.7 ms: this fit flattens at one microbatch per replica, overstating it)
    assert parts[BUBBLE] >= 0.5 * a_true, (parts[BUBBLE], a_true)
    assert sum(parts.values()) == pytest.approx(rs.serial_time(), rel=1e-9)
    assert min(parts.values()) >= 0
    # the document carries the bubble as its own line, and its lines sum to the total
    sf = entry["scaling"]["serial_fraction"]
    assert sf["by_category"][BUBBLE] == pytest.approx(parts[BUBBLE] / t1, rel=1e-6)
    assert sum(sf["by_category"].values()) == pytest.approx(sf["total"], rel=1e-9)


def test_first_finding_is_the_bubble_with_its_lever(study: tuple[dict[str, Any], Any, Any]) -> None:
    """The bubble is the biggest replayed lever at the target: it leads, names the levers
    people use, and its gain is the replay's; send/recv is neither a transfer the
    communication lever frees nor an op lever of its own."""
    entry, _, _ = study
    first = entry["findings"][0]
    assert first["text"].startswith("Pipeline bubble:")
    assert "More microbatches per step" in first["text"] and "interleaved" in first["text"]
    target = max(int(p["world_size"]) for p in entry["scaling"]["projections"])
    points = {int(p["world_size"]): p for p in entry["scaling"]["replay"]["levers"]["points"]}
    levers = points[target]["levers"]
    assert first["value"] == pytest.approx(levers["pipeline_bubble"]["speedup"])
    assert levers["pipeline_bubble"]["speedup"] > levers["communication"]["speedup"]
    assert not any("SendRecv" in f["text"] and f["kind"] == "op" for f in entry["findings"])


def test_p2p_nodes_are_not_links_or_variability(study: tuple[dict[str, Any], Any, Any]) -> None:
    """No alpha-beta is fitted on the p2p nodes, and they wait for no slowest rank."""
    _, _, rs = study
    assert not any(key[0] == "sendrecv" for key in rs.comm.fits)
    base = rs.base
    p2p = p2p_rows(base.coll)
    assert p2p.any() and (~p2p).any()  # the DP AllReduces remain collectives
    _, pre, _ = rs.split_durations(4 * base.world_size)
    assert np.all(pre[base.coll["node"].to_numpy()[p2p]] == 0)


def test_p2p_law_is_the_bubble_plus_the_transfers() -> None:
    """Time per step in p2p nodes of a stage: a bubble of 3 ms and 64 microbatches of 50 us
    transfers at N = 4 (M = 64 over DP = N / 4): 3 ms + 12.8 ms * 4 / N exactly; and a pure
    b/N series keeps the a + b/N form (a = 0), b/N its runner-up."""
    sizes = [4, 8, 16, 32]
    law = p2p_law(sizes, [3e-3 + 64 * 50e-6 * 4 / n for n in sizes])
    assert law.form == "a+b/N"
    assert law.coef == pytest.approx((3e-3, 0.0128), rel=1e-9)
    assert law.value(256) == pytest.approx(3e-3 + 0.0128 / 256, rel=1e-9)
    flat = p2p_law(sizes, [0.09 / n for n in sizes])
    assert (flat.form, flat.alt_form) == ("a+b/N", "b/N")
    assert flat.coef == pytest.approx((0.0, 0.09), abs=1e-12)
    assert fit_law(sizes, [0.09 / n for n in sizes]).form == "b/N"


def test_one_f_one_b_order() -> None:
    """Stage s: p - s - 1 warm-up forwards, then one forward / one backward, then cool-down."""
    assert one_f_one_b(4, 0, 4) == [
        ("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0), ("B", 1), ("B", 2), ("B", 3)
    ]  # fmt: skip
    assert one_f_one_b(4, 3, 3) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2)]
    assert one_f_one_b(4, 1, 1) == [("F", 0), ("B", 0)]


def test_truth_bubble_share_grows_with_n(tmp_path: Path) -> None:
    """The generator's truth: the bubble's share of the step grows as DP cuts microbatches."""
    p = replace(SMALL, dp_sizes=(1,), dp_targets=(8,), truth_steps=4, steps=1)
    truth = build_study(p, str(tmp_path / "s"))
    share = truth["bubble_share"]
    assert share["32"] > 2 * share["4"]  # type: ignore[index]


# -- interleaved 1F1B (virtual pipeline stages) ----------------------------------------------

#: SMALL with two model chunks per rank (Megatron's virtual stages): the bubble shrinks to the
#: fill and drain of chunk passes, and past m = p microbatches per replica the ring starves.
INTERLEAVED = replace(SMALL, virtual=2)


@pytest.fixture(scope="module")
def interleaved_study(pipeline_study: Any) -> tuple[dict[str, Any], Any, Any]:
    """(study entry, truth, the fitted ReplayStudy) of the interleaved study, analyzed once per
    session (tests/pipeline_studies.py)."""
    _, entry, truth, replayed = pipeline_study(2)
    return entry, truth, replayed


def test_interleaved_projection_meets_targets(
    interleaved_study: tuple[dict[str, Any], Any, Any],
) -> None:
    """Within 10/10/15% at 2x/4x/8x, the truth inside the interval. Read as 1F1B (chunks
    unread: the p2p law alone) the 4x and 8x targets, at 2 and 1 microbatches per replica where
    the ring of 4 stages starves, were +21..+25% and +29..+40% (seeds 1-3)."""
    entry, truth, rs = interleaved_study
    assert_meets_targets(entry, truth, INTERLEAVED.targets)
    for run in entry["runs"]:
        assert run["replay_error"] <= 0.01
    assert type(rs.p2p).__name__ == "StarvedLaw"


def test_interleaved_mesh_and_advice(interleaved_study: tuple[dict[str, Any], Any, Any]) -> None:
    """The mesh carries the chunks (JSON and the report's words), and the bubble finding does
    not advise the interleaving the job already runs."""
    entry, _, _ = interleaved_study
    for dims in entry["scaling"]["replay"]["mesh"]["runs"].values():
        pp = [d for d in dims if d["dimension"] == "PP"]
        assert pp and pp[0]["size"] == 4 and pp[0]["virtual_chunks"] == 2
    first = entry["findings"][0]["text"]
    assert first.startswith("Pipeline bubble:")
    assert "already interleaves 2 model chunks" in first and "fewer stages" in first
    assert "an interleaved schedule" not in first


def test_interleaved_order_is_megatrons() -> None:
    """Megatron-LM's interleaved 1F1B: ``(p - s - 1) 2 + (v - 1) p`` warm-up forwards over the
    schedule table (groups of p microbatches per chunk), backwards with the chunks reversed;
    every pass once."""
    last = interleaved(4, 3, 8, 2)
    assert last[:6] == [("F", 0, 0), ("F", 1, 0), ("F", 2, 0), ("F", 3, 0), ("F", 0, 1),
                        ("B", 0, 1)]  # fmt: skip
    first = interleaved(4, 0, 8, 2)
    assert first.index(("B", 0, 1)) == 2 * 3 + 4 + 1  # warm-up, then one forward
    for ops in (last, first, interleaved(4, 1, 2, 2)):
        assert len(ops) == len(set(ops))
    few = [("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("F", 1, 1), ("B", 0, 1), ("B", 1, 1),
           ("B", 0, 0), ("B", 1, 0)]  # fmt: skip
    assert interleaved(4, 1, 2, 2) == few  # two microbatches: all forwards first
    assert schedule_table(2, 3, 2) == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]


def test_chunk_reading_exact() -> None:
    """v from one stage's send/recv per neighbour pair: the ring's closing pair carries v - 1
    of every v crossings; a middle stage (equal pairs) or an unwhole ratio cannot tell."""
    assert chunk_reading({"pp_0_1": 32.0, "pp_0_3": 16.0}) == 2
    assert chunk_reading({"pp_2_3": 48.0, "pp_0_3": 32.0}) == 3
    assert chunk_reading({"pp_0_1": 16.0}) == 1
    assert chunk_reading({"pp_0_1": 16.0, "pp_1_2": 16.0}) is None
    assert chunk_reading({"a": 30.0, "b": 17.0}) is None
    assert chunk_reading({}) is None
    assert chunk_passes({"pp_0_1": 32.0, "pp_0_3": 16.0}) == 16.0
    assert starved_chunks(4, 2, 8) == 0.0 and starved_chunks(4, 2, 1) == 3.0
    assert starved_chunks(4, 1, 1) == 0.0


def _p2p_rank(where: Path, rank: int, pairs: dict[str, tuple[list[int], int]]) -> Path:
    """A tiny trace: one step, ``count`` send/recv kernels per pair ``name -> (ranks, count)``."""
    t = MiniTrace(rank=rank, world_size=4).step(1, 0, 1000)
    ts = 10.0
    for name, (ranks, count) in pairs.items():
        for k in range(count):
            extra = {"Collective name": "send" if k % 2 else "recv", "Group size": 2,
                     "Process Group Name": name, "Process Group Ranks": str(ranks)}  # fmt: skip
            t.nccl(ts, 5, name="ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
                   stream=33, extra=extra)  # fmt: skip
            ts += 10
    return t.write(where / f"rank{rank}.json")


@pytest.mark.parametrize(
    ("pairs", "want"),
    [
        ({"pp_0_1": ([0, 1], 8), "pp_0_3": ([0, 3], 4)}, (True, 2)),  # first stage, v = 2
        ({"pp_2_3": ([2, 3], 12), "pp_0_3": ([0, 3], 8)}, (True, 3)),  # last stage, v = 3
        ({"pp_0_1": ([0, 1], 4), "pp_1_2": ([1, 2], 4)}, (True, None)),  # middle: cannot tell
        ({"pp_0_1": ([0, 1], 6)}, (True, 1)),  # an end of a plain 1F1B chain
        ({}, (False, None)),  # no pipeline
    ],
)
def test_trace_chunks_on_tiny_traces(
    tmp_path: Path, pairs: dict[str, tuple[list[int], int]], want: tuple[bool, int | None]
) -> None:
    """Inspect's reading of one rank's trace (every event carrying a pair group counted)."""
    got = trace_chunks(load_trace(str(_p2p_rank(tmp_path, 0, pairs))))
    assert got == want
    assert run_chunks([None, 2, 2, None]) == 2 and run_chunks([None, None]) is None
