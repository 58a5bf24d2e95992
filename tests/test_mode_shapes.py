"""Strong vs weak from tensor shapes: shrinking inputs mean a split global batch."""

from __future__ import annotations

from pathlib import Path

import pytest

import tracescale
from tracescale.classify.work_size import _elements, mode_from_shapes

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def test_elements_of_input_dims() -> None:
    assert _elements("[[32, 128], [256, 128], [256], []]") == [4096.0, 32768.0, 256.0, -1.0]
    assert _elements("not json") == []


def _inputs(batch: int) -> dict[str, float]:
    """Ten ops: five activation inputs of ``batch`` rows, five weights."""
    acts = {f"aten::op{i}#0": float(batch * 128) for i in range(5)}
    weights = {f"aten::op{i}#1": 32768.0 for i in range(5)}
    return {**acts, **weights}


def test_split_batch_is_strong_and_kept_batch_is_weak() -> None:
    strong = mode_from_shapes([4, 1, 2], [_inputs(16), _inputs(64), _inputs(32)])
    assert strong.mode == "strong"
    assert strong.reason == (
        "tensor shapes: 5 of 10 op inputs shrank from N=1 to N=4 (e.g. aten::op0: 8192 -> "
        "2048 elements; 1/N would be x0.250): the global batch is split, so strong scaling"
    )
    weak = mode_from_shapes([1, 4], [_inputs(32), _inputs(32)])
    assert (weak.mode, weak.reason) == (
        "weak",
        "tensor shapes: 10 of 10 op inputs kept their size from N=1 to N=4: the work per rank "
        "is constant, so weak scaling",
    )
    # Too few inputs in common, or no shapes at all: the shapes say nothing.
    assert mode_from_shapes([1, 4], [{"a#0": 4.0}, {"a#0": 1.0}]).mode is None
    assert mode_from_shapes([1, 4], [{}, {}]).mode is None


@pytest.mark.parametrize("study,mode", [("ddp_cpu_strong", "strong"), ("ddp_cpu_weak", "weak")])
def test_shipped_cpu_samples_are_detected(study: str, mode: str) -> None:
    # Per-rank compute grows with N on the oversubscribed machine these were recorded on, so
    # timing alone calls the strong study weak; the shapes do not.
    doc = tracescale.analyze(str(SAMPLES / study), jobs=1).studies[0]
    assert doc["mode"] == mode
    assert doc["mode_reason"].startswith("tensor shapes: ")
