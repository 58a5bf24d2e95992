"""Below ``last_read.HELD_BYTES`` the map step in this process keeps every trace it reads, so
the replay decodes none of its representative ranks again, and the study is the one a second
decode gives; past the bound only the last trace is kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tracescale.parallel.tasks as tasks
import tracescale.replay.engine.run as replay_run
from tracescale.api import analyze
from tracescale.ingest import last_read
from tracescale.ingest.decode import load_trace

STUDY = Path(__file__).parent.parent / "sample_traces" / "sim_gpu_strong"


def _doc(study) -> str:  # type: ignore[no-untyped-def]
    d = dict(study.doc)
    d.pop("tool")
    return json.dumps(d, sort_keys=True)


def test_a_small_study_decodes_each_file_once_and_is_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    real = replay_run.load_trace  # type: ignore[attr-defined]

    def counted(path, **kw):  # type: ignore[no-untyped-def]
        calls.append(path)
        return real(path, **kw)

    monkeypatch.setattr(replay_run, "load_trace", counted)
    once = analyze(STUDY, jobs=1, no_cache=True)
    assert calls == []  # every representative rank was held by the map step
    assert last_read._held == {} and last_read._kept == {}  # nothing outlives the analysis
    monkeypatch.setattr(replay_run, "take", lambda key: None)  # the replay decodes again
    again = analyze(STUDY, jobs=1, no_cache=True)
    assert len(calls) == len(once.doc["studies"][0]["runs"])
    assert _doc(once) == _doc(again)


def test_traces_past_the_bound_are_kept_only_as_the_last_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = str(next((STUDY / "ws1").glob("*.json.gz")))
    trace = load_trace(path)
    size = last_read._held_bytes(trace)
    assert size is not None and size > 0
    monkeypatch.setattr(last_read, "HELD_BYTES", size + size // 2)  # room for one
    last_read.forget()
    with last_read.keeping_last_read():
        for name in ("a", "b", "c"):
            last_read.remember((name, 0, "d", 1), trace, None)
    assert list(last_read._held) == [("a", 0, "d", 1)]
    assert list(last_read._kept) == [("c", 0, "d", 1)]
    assert last_read.take(("b", 0, "d", 1)) is None  # neither held nor the last
    assert last_read.take(("a", 0, "d", 1)) == (trace, None)
    assert last_read._held == {} and last_read._kept == {}
    last_read.forget()


def test_workers_hold_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(next((STUDY / "ws1").glob("*.json.gz")))
    last_read.forget()
    tasks.run_task(tasks.RankTask(path, 0))  # outside keeping_last_read: a worker process
    assert last_read._held == {} and last_read._kept == {}
