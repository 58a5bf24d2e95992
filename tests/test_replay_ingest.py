"""The dependency args a replay reads: cuda_sync events' producer stream and event-record id."""

from __future__ import annotations

import json
from pathlib import Path

from tracescale.ingest import load_trace


def _sync(ts: int, wait_stream: int, record_corr: int) -> dict[str, object]:
    return {
        "ph": "X",
        "cat": "cuda_sync",
        "name": "Stream Wait Event",
        "pid": 0,
        "tid": 24,
        "ts": ts,
        "dur": 2,
        "args": {
            "cuda_sync_kind": "Stream Wait Event",
            "stream": 24,
            "wait_on_stream": wait_stream,
            "wait_on_cuda_event_record_corr_id": record_corr,
            "correlation": 9,
            "device": 0,
        },
    }


def test_wait_on_stream_and_record_correlation_are_columns(tmp_path: Path) -> None:
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1}
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [kernel, _sync(5, 20, 1385)]}))
    ev = load_trace(str(p)).events
    assert ev.wait_on_stream.tolist() == [-1, 20]
    assert ev.wait_on_corr.tolist() == [-1, 1385]


def test_lenient_path_reads_them_too(tmp_path: Path) -> None:
    # NaN elsewhere forces the lenient decoder.
    bad = {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}
    text = json.dumps({"traceEvents": [bad, _sync(5, 20, 62)]}).replace(
        '"dur": 1}', '"dur": 1, "x": NaN}', 1
    )
    p = tmp_path / "t.json"
    p.write_text(text)
    ev = load_trace(str(p)).events
    assert ev.wait_on_stream.tolist() == [-1, 20]
    assert ev.wait_on_corr.tolist() == [-1, 62]
