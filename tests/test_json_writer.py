"""The JSON writer: msgspec's encoding laid out by :func:`tracescale.report.jsonsafe.dumps`.

A study of a million steps holds twenty million numbers; the writer puts a list of numbers (and
each row of a list of rows) on one line, writes non-finite numbers as null and leaves names
exact. Every document it writes parses to what the standard library's encoder would write.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

import numpy as np

from tracescale.report.jsonsafe import dumps, finite
from tracescale.report.render import render_json


def test_exact_layout_rows_on_one_line_nulls_and_names_kept() -> None:
    doc = {
        "a": [1, 2.5, float("nan")],
        "empty": {},
        "none": [],
        "rows": {"columns": ["x", "y"], "data": [[1.0, None], [2.0, float("inf")]]},
        3: "kernel \u00e9",
        "items": [{"k": 1}, {"s": [1, "],["]}],
        "deep": [[1, [2]], [3]],
        "np": np.float64(0.25),
    }
    assert dumps(doc, indent=2) == (
        "{\n"
        '  "a": [1,2.5,null],\n'
        '  "empty": {},\n'
        '  "none": [],\n'
        '  "rows": {\n'
        '    "columns": ["x","y"],\n'
        '    "data": [\n'
        "      [1.0,null],\n"
        "      [2.0,null]\n"
        "    ]\n"
        "  },\n"
        '  "3": "kernel \u00e9",\n'
        '  "items": [\n'
        "    {\n"
        '      "k": 1\n'
        "    },\n"
        "    {\n"
        '      "s": [1,"],["]\n'
        "    }\n"
        "  ],\n"
        '  "deep": [\n'
        "    [\n"
        "      1,\n"
        "      [2]\n"
        "    ],\n"
        "    [3]\n"
        "  ],\n"
        '  "np": 0.25\n'
        "}"
    )
    assert dumps(doc) == (
        '{"a":[1,2.5,null],"empty":{},"none":[],"rows":{"columns":["x","y"],'
        '"data":[[1.0,null],[2.0,null]]},"3":"kernel \u00e9","items":[{"k":1},'
        '{"s":[1,"],["]}],"deep":[[1,[2]],[3]],"np":0.25}'
    )


def _random_value(rng: random.Random, depth: int) -> Any:
    r = rng.random()
    if depth > 3 or r < 0.35:
        return rng.choice([0, -7, 2.5, 1e-300, None, True, "x", "],[", "\u2028", math.nan, []])
    if r < 0.7:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randint(0, 3))}


def test_every_document_parses_to_what_the_standard_library_writes() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        value = _random_value(rng, 0)
        expected = json.loads(json.dumps(finite(value)))
        assert json.loads(dumps(value, indent=2)) == expected
        assert json.loads(dumps(value)) == expected


def test_documents_msgspec_refuses_take_the_standard_library_path() -> None:
    """Lone surrogates (a file name that is not UTF-8), integers past 64 bits and keys that
    are neither strings nor numbers still write, as the standard library writes them."""
    assert dumps({"path": "r\udcff.json"}, indent=2) == '{\n  "path": "r\udcff.json"\n}'
    assert dumps({"n": 2**70}) == '{"n":1180591620717411303424}'
    assert dumps({(1, 2): float("inf")}) == '{"(1, 2)":null}'


def test_render_json_escapes_what_a_terminal_would_act_on() -> None:
    text = render_json({"name": "a\u202eb\x7fc\x1b"})
    assert text == '{\n  "name": "a\\u202eb\\u007fc\\u001b"\n}\n'
    assert json.loads(text) == {"name": "a\u202eb\x7fc\x1b"}
