"""A map with no --jobs runs a small study in this process (workers cost more than they save);
the size is estimated from the files on disk, never trusted from what a file claims."""

from __future__ import annotations

from pathlib import Path

from tracescale.parallel.mapping import IN_PROCESS_BYTES, small_enough_for_one_process
from tracescale.parallel.tasks import RankTask


def _file(path: Path, size: int) -> RankTask:
    with open(path, "wb") as fh:
        fh.truncate(size)
    return RankTask(str(path), 0)


def test_small_studies_stay_in_process_and_large_or_unreadable_ones_do_not(
    tmp_path: Path,
) -> None:
    half = IN_PROCESS_BYTES // 2
    assert small_enough_for_one_process([_file(tmp_path / "a.json", half)])
    assert not small_enough_for_one_process(
        [_file(tmp_path / "b.json", half), _file(tmp_path / "c.json", half + 1)]
    )
    # a compressed trace counts eight times its size: 1/8 of the bound is at it, one byte more past
    eighth = IN_PROCESS_BYTES // 8
    assert small_enough_for_one_process([_file(tmp_path / "d.json.gz", eighth)])
    assert not small_enough_for_one_process([_file(tmp_path / "e.json.gz", eighth + 1)])
    assert not small_enough_for_one_process([RankTask(str(tmp_path / "missing.json"), 0)])
