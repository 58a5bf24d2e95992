"""The representative ranks' graphs in the on-disk cache: same study, no trace read when cached."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tracescale.replay.engine.run as replay_run_module
from tracescale.parallel.entry import EntryError
from tracescale.pipeline import analyze
from tracescale.replay.engine.graph_cache import decode_graph, encode_graph, graph_key
from tracescale.simulate import pattern_params, simulate

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "sim_gpu_strong"


def _doc(path: Path, **options: Any) -> str:
    # The study-level cache would answer the repeat runs before any graph is read.
    doc = analyze(str(path), jobs=1, use_study_cache=False, **options).doc
    return json.dumps(doc, sort_keys=True)


def _no_trace_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a cached analyze read a trace for the replay")

    monkeypatch.setattr(replay_run_module, "load_trace", refuse)


def _pattern_study(root: Path) -> Path:
    params = pattern_params("fsdp", {"layers": 3, "model_bytes": 24_000_000})
    simulate([2, 4], root, pattern="fsdp", steps=2, seed=5, params=params)
    return root


@pytest.mark.parametrize("which", ["sample", "pattern"])
def test_cached_graph_gives_the_same_study_without_reading_traces(
    which: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if which == "sample":
        study = tmp_path / "study"
        shutil.copytree(SAMPLE, study)
    else:
        study = _pattern_study(tmp_path / "study")
    cache = tmp_path / "cache"
    uncached = _doc(study, no_cache=True)
    filled = _doc(study, cache_dir=str(cache))
    assert len(list(cache.glob("*.rg"))) >= 2  # one graph per replayed run
    _no_trace_reads(monkeypatch)
    cached = _doc(study, cache_dir=str(cache))
    assert uncached == filled == cached
    assert '"replay_error"' in cached


def test_damaged_or_stale_graph_entry_is_rebuilt(tmp_path: Path) -> None:
    study = _pattern_study(tmp_path / "study")
    cache = tmp_path / "cache"
    first = _doc(study, cache_dir=str(cache))
    for entry in cache.glob("*.rg"):
        blob = bytearray(entry.read_bytes())
        blob[-5] ^= 0xFF
        entry.write_bytes(bytes(blob))
    assert _doc(study, cache_dir=str(cache)) == first
    with pytest.raises(EntryError):
        decode_graph(bytes(blob), {})


def test_graph_entry_round_trips_exactly(tmp_path: Path) -> None:
    study = _pattern_study(tmp_path / "study")
    cache = tmp_path / "cache"
    _doc(study, cache_dir=str(cache))
    entry = next(cache.glob("*.rg"))
    blob = entry.read_bytes()
    header_key = json.loads(
        blob[16 + 32 + 8 : 16 + 32 + 8 + int.from_bytes(blob[48:56], "little")]
    )["key"]
    item = decode_graph(blob, header_key)
    again = decode_graph(encode_graph(item, header_key), header_key)
    for f in ("kind", "start", "dur", "dep", "dep2", "lag", "order", "step", "step_numbers"):
        a, b = getattr(item.graph, f), getattr(again.graph, f)
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert item.graph.groups == again.graph.groups
    assert item.graph.collectives.equals(again.graph.collectives)
    assert item.collectives.equals(again.collectives)
    inferred = dataclasses.replace(item, graph=dataclasses.replace(item.graph, inferred_waits=3))
    assert decode_graph(encode_graph(inferred, header_key), header_key).graph.inferred_waits == 3
    with pytest.raises(EntryError):
        decode_graph(blob, {**header_key, "size": header_key["size"] + 1})


def test_graph_key_changes_with_file_and_rank(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text("{}")
    k0 = graph_key(str(trace), 0, "r", 1)
    assert k0 is not None and k0 != graph_key(str(trace), 1, "r", 1)
    trace.write_text("{ }")
    assert graph_key(str(trace), 0, "r", 1) != k0
    assert graph_key(str(tmp_path / "missing.json"), 0, "r", 1) is None


def test_stream_index_finds_what_a_scan_finds() -> None:
    from tracescale.replay.waits.cross_stream import _StreamIndex

    rng = np.random.default_rng(1)
    for n in (1, 2, 7, 60):
        streams = rng.choice(np.array([3, 7, 13], dtype=np.int64), size=n)
        ix = _StreamIndex.of(streams)
        for s in (3, 7, 13, 99):
            for j in range(n + 2):
                after = np.flatnonzero(streams[j:] == s)
                assert ix.first_from(s, j) == (j + int(after[0]) if after.size else -1)
                same = np.flatnonzero(streams[:j] == s)
                other = np.flatnonzero(streams[:j] != s)
                assert ix.last_before(j, s, other=False) == (int(same[-1]) if same.size else -1)
                assert ix.last_before(j, s, other=True) == (int(other[-1]) if other.size else -1)
