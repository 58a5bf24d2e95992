"""The 1-D integer keys of classify and step finding give what the 2-D uniques gave, exactly."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tracescale.classify.rank import _HOST_T
from tracescale.classify.rules import (
    DEVICE_TARGETS,
    Rule,
    classify_events,
    load_rules,
    pair_keys,
)
from tracescale.ingest.decode import load_trace
from tracescale.ingest.steps import _distinct_pairs

SAMPLES = Path(__file__).parents[1] / "sample_traces"


def reference_classify(
    rules: tuple[Rule, ...],
    targets: tuple[str, ...],
    strings: tuple[str, ...],
    name: np.ndarray,
    cat: np.ndarray,
) -> np.ndarray:
    """Per event, first matching rule: the definition, with no grouping at all."""
    out = np.full(name.shape[0], -1, dtype=np.int8)
    for i, (c, n) in enumerate(zip(cat.tolist(), name.tolist(), strict=True)):
        cat_s = strings[c] if c >= 0 else ""
        name_s = strings[n] if n >= 0 else ""
        for r in rules:
            if (r.cat is None or r.cat == cat_s) and r.pattern.search(name_s):
                out[i] = targets.index(r.target) if r.target in targets else -1
                break
    return out


def test_pair_keys_round_trip_and_order() -> None:
    rng = np.random.default_rng(0)
    high = rng.integers(-1, 2**31 - 1, 5000).astype(np.int32)
    low = rng.integers(-1, 2**31 - 1, 5000).astype(np.int32)
    high[:10], low[10:20] = -1, -1
    low[20:30] = 2**31 - 1
    keys = pair_keys(high, low)
    np.testing.assert_array_equal(keys >> 32, high)
    np.testing.assert_array_equal((keys & 0xFFFFFFFF) - 1, low)
    order = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(order, np.lexsort((low, high)))


def test_classify_events_matches_per_event_definition() -> None:
    strings = ("", "kernel", "cpu_op", "ncclKernel_AllReduce", "Memcpy HtoD", "aten::mm", "x")
    rules = (
        Rule(re.compile("nccl"), "kernel", "communication"),
        Rule(re.compile("Memcpy"), None, "memcpy"),
        Rule(re.compile("^aten"), "cpu_op", "compute"),
        Rule(re.compile(""), "x", "ignore"),
        Rule(re.compile("."), None, "compute"),
    )
    rng = np.random.default_rng(1)
    name = rng.integers(-1, len(strings), 3000).astype(np.int32)
    cat = rng.integers(-1, len(strings), 3000).astype(np.int32)
    got = classify_events(rules, DEVICE_TARGETS, strings, name, cat)
    want = reference_classify(rules, DEVICE_TARGETS, strings, name, cat)
    np.testing.assert_array_equal(got, want)
    assert set(np.unique(got).tolist()) >= {-1, 0, 1, 2}
    empty = np.zeros(0, dtype=np.int32)
    assert classify_events(rules, DEVICE_TARGETS, strings, empty, empty).shape == (0,)


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*/ws*/*.json*"))[:6], ids=lambda p: p.name)
def test_classify_events_on_sample_traces(path: Path) -> None:
    trace = load_trace(str(path))
    ev, rules = trace.events, load_rules()
    for ruleset, targets in ((rules.device, DEVICE_TARGETS), (rules.host, _HOST_T)):
        got = classify_events(ruleset, targets, trace.strings, ev.name, ev.cat)
        want = reference_classify(ruleset, targets, trace.strings, ev.name, ev.cat)
        np.testing.assert_array_equal(got, want)


def test_distinct_pairs_match_2d_unique() -> None:
    rng = np.random.default_rng(2)
    pid = rng.choice(np.array([-3, -1, 0, 7, 2**40, 25738]), 4000).astype(np.int64)
    tid = rng.choice(np.array([-2, 1, 5, 2**50, 99]), 4000).astype(np.int64)
    pids, tids, inverse = _distinct_pairs(pid, tid)
    pairs, inv2 = np.unique(np.stack([pid, tid], axis=1), axis=0, return_inverse=True)
    np.testing.assert_array_equal(pids, pairs[:, 0])
    np.testing.assert_array_equal(tids, pairs[:, 1])
    np.testing.assert_array_equal(inverse, inv2.ravel())
