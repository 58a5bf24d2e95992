"""The map step's last trace is handed to the replay in this process, once: a single-trace
study decodes its file once, not twice, and gives the same study as a second decode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tracescale.parallel.tasks as tasks
import tracescale.replay.engine.run as replay_run
from tracescale.api import analyze
from tracescale.ingest import last_read

ONE_TRACE = Path(__file__).parent.parent / "sample_traces" / "sim_gpu_strong" / "ws1"


def _doc(study) -> str:  # type: ignore[no-untyped-def]
    d = dict(study.doc)
    d.pop("tool")
    return json.dumps(d, sort_keys=True)


def _count_loads(mp: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    for module in (tasks, replay_run):
        real = module.load_trace

        def counted(path, real=real, **kw):  # type: ignore[no-untyped-def]
            calls.append(path)
            return real(path, **kw)

        mp.setattr(module, "load_trace", counted)
    return calls


def test_a_single_trace_is_decoded_once_and_the_study_is_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _count_loads(monkeypatch)
    once = analyze(ONE_TRACE, jobs=1, no_cache=True)
    assert len(calls) == 1
    assert last_read._kept == {}  # taken by the replay: nothing stays held
    monkeypatch.setattr(replay_run, "take", lambda key: None)  # the replay decodes again
    twice = analyze(ONE_TRACE, jobs=1, no_cache=True)
    assert len(calls) == 3
    assert _doc(once) == _doc(twice)


def test_nothing_is_kept_outside_the_map_step_or_after_an_analysis() -> None:
    last_read.remember(("a", 0, "d", 1), object(), None)  # type: ignore[arg-type]
    assert last_read._kept == {}  # a worker process (not inside keeping_last_read) keeps none
    with last_read.keeping_last_read():
        last_read.remember(("a", 0, "d", 1), object(), None)  # type: ignore[arg-type]
        last_read.remember(("b", 0, "d", 1), object(), None)  # type: ignore[arg-type]
    assert list(last_read._kept) == [("b", 0, "d", 1)]  # one trace at a time
    assert last_read.take(("a", 0, "d", 1)) is None and last_read._kept == {}
    analyze(ONE_TRACE, jobs=1, no_cache=True, replay=False)
    assert last_read._kept == {}  # no replay took it: the analysis dropped it
