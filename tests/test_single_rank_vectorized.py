"""The vectorized cross-rank search for single-rank work finds exactly what the per-name loop
(the definition, kept here) found."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracescale.classify.rank import RankResult, classify_rank
from tracescale.classify.rules import load_rules
from tracescale.classify.single_rank import _MIN_SHARE, _MUCH_SMALLER, single_rank_ranges
from tracescale.ingest.decode import load_trace
from tracescale.simulate import make_params, simulate

SAMPLES = Path(__file__).parents[1] / "sample_traces"


def reference(group: Sequence[RankResult]) -> dict[int, pd.DataFrame]:
    """The loop over names and hits, as first written."""
    frames = [r.annotations.assign(rank=r.rank) for r in group if len(r.annotations)]
    if len(group) < 2 or not frames:
        return {}
    ann = pd.concat(frames, ignore_index=True)
    totals = pd.concat(
        [r.range_totals.assign(rank=r.rank) for r in group if len(r.range_totals)],
        ignore_index=True,
    )
    per = totals.groupby(["step", "name", "rank"])["seconds"].sum().unstack("rank", fill_value=0.0)
    per = per.reindex(columns=sorted(r.rank for r in group), fill_value=0.0)
    is_op = totals.groupby(["step", "name"])["is_op"].all().reindex(per.index).to_numpy()
    durations = pd.concat([r.steps[["step", "duration"]] for r in group])
    step_len = durations.groupby("step")["duration"].median()
    values = per.to_numpy()
    top = values.max(axis=1)
    second = np.sort(values, axis=1)[:, -2]
    owner = per.columns.to_numpy()[values.argmax(axis=1)]
    floor = step_len.reindex(per.index.get_level_values("step")).to_numpy() * _MIN_SHARE
    allowed = np.where(is_op, 0.0, _MUCH_SMALLER * top)
    hit = (top > floor) & (second <= allowed)
    names = per.index.get_level_values("name").to_numpy()
    steady: set[tuple[str, int]] = set()
    for name in np.unique(names[hit]):
        rows = names == name
        for rank in np.unique(owner[hit & rows]):
            if (hit & rows & (owner == rank)).sum() * 2 >= rows.sum():
                steady.add((str(name), int(rank)))
    out: dict[int, pd.DataFrame] = {}
    for (step, name), rank in zip(per.index[hit], owner[hit], strict=True):
        if (str(name), int(rank)) not in steady:
            continue
        rows_df = ann[(ann["rank"] == rank) & (ann["step"] == step) & (ann["name"] == name)]
        out[int(rank)] = pd.concat([out.get(int(rank), rows_df.iloc[:0]), rows_df])
    return {k: v for k, v in out.items() if len(v)}


def _group(folder: Path) -> list[RankResult]:
    rules = load_rules()
    files = sorted(folder.glob("*.json*"))
    return [classify_rank(load_trace(str(f)), rules, rank=i) for i, f in enumerate(files)]


def assert_same(got: dict[int, pd.DataFrame], want: dict[int, pd.DataFrame]) -> None:
    assert sorted(got) == sorted(want)
    for rank, frame in want.items():
        pd.testing.assert_frame_equal(got[rank], frame)


@pytest.mark.parametrize(
    "folder",
    [SAMPLES / "sim_gpu_strong" / "ws4", SAMPLES / "ddp_cpu_strong" / "ws4"],
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_matches_the_loop_on_sample_runs(folder: Path) -> None:
    group = _group(folder)
    assert_same(single_rank_ranges(group), reference(group))


def test_matches_the_loop_and_finds_the_reduction(tmp_path: Path) -> None:
    simulate([4], tmp_path, steps=6, seed=2, params=make_params({"layers": 8}))
    group = _group(tmp_path / "ws4")
    got = single_rank_ranges(group)
    assert got, "the simulated rank-0 reduction is single-rank work"
    assert_same(got, reference(group))
