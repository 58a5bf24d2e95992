"""Hypothesis properties of the output side: a saved study with hostile strings or numbers.

Every string field of a saved study gets control characters, escape sequences, line breaks,
bidirectional overrides or a lone surrogate; every numeric field may become NaN, +-inf, 1e308,
-0.0 or 2^63. ``report`` (table, Markdown, HTML, JSON) and ``compare --fail-on-regression``
then either work or refuse in one line (exit 3); a rendered text never holds a raw control
character (JSON escapes them, keeping each name exact); JSON stays strict; the gate never
passes on a run with no step time. Run by test_hostile_output_fuzz.py in a child under an
address-space cap, so a blow-up fails the test instead of the machine.

Usage: ``python tests/hostile_output_cases.py``; exit 0 when every property held.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import math
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracescale.cli.main import main
from tracescale.comparison.core import no_data
from tracescale.text import BIDI

warnings.simplefilter("always")  # a warning printed on every call, so a failure replays
RUN = Path(__file__).resolve().parents[1] / "sample_traces" / "sim_gpu_strong" / "ws1"
#: Examples per property (``HOSTILE_EXAMPLES`` in the environment).
EXAMPLES = int(os.environ.get("HOSTILE_EXAMPLES", "25"))
FORBIDDEN = {chr(c) for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]} | set(BIDI)
PIECES = [
    "\x1b]0;title\x07",
    "\x1b]8;;javascript:alert(1)\x1b\\",
    "\x1b[2J\x1b[31m",
    "\x9b31m",
    "\n",
    "\r",
    "\t",
    "\x00",
    "\x7f",
    "\u202e",
    "\u2066",
    "\u200f",
    "\udcff",
    "[bold]",
    "</script>",
    "`",
    "|",
    "<",
]
HOSTILE_TEXT = st.lists(
    st.one_of(st.sampled_from(PIECES), st.characters(max_codepoint=0x2FFF)), max_size=12
).map("".join)
NUMBERS = st.sampled_from(
    [math.nan, math.inf, -math.inf, 1e308, -1e308, 0.0, -0.0, -1, 2**63, 5e-324]
)


@functools.cache
def base_doc() -> dict[str, Any]:
    from tracescale import api

    return api.analyze(str(RUN), jobs=1, no_cache=True).doc


def _leaves(value: Any, kind: type | tuple[type, ...], at: tuple[Any, ...] = ()) -> list[tuple]:
    """Paths (key/index tuples) of every leaf of ``kind`` (bools are not numbers here)."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, kind, (*at, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaves(v, kind, (*at, i))]
    ok = isinstance(value, kind) and not isinstance(value, bool)
    return [at] if ok and at and at[0] != "schema_version" else []


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    node: Any = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _cli(args: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of one in-process CLI run."""
    out, err = io.StringIO(), io.StringIO()
    code: Any = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args) or 0
        except SystemExit as exc:
            code = exc.code or 0
    return int(code), out.getvalue(), err.getvalue()


def _check(code: int, out: str, err: str, fmt: str, codes: set[int]) -> None:
    assert code in codes, (code, err)
    assert err.count("\n") <= 1 and (not err or err.startswith("tracescale: error: ")), err
    assert "internal error" not in err and "Traceback" not in err, err
    if code != 0 and code != 1:
        return
    if fmt in ("table", "markdown", "json"):
        raw = {c for c in out if c in FORBIDDEN and c != "\n"}
        assert not raw, (fmt, raw)
    if fmt == "json":
        json.loads(out, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))


def _write(doc: dict[str, Any], folder: str, name: str) -> str:
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as fh:
        json.dump(doc, fh, ensure_ascii=True)  # NaN/inf as the literals a careless writer uses
    return path


@settings(
    max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
@given(data=st.data(), fmt=st.sampled_from(["table", "markdown", "html", "json"]))
def control_characters_in_every_string(data: st.DataObject, fmt: str) -> None:
    """Any string field of a saved study made hostile: report works (text inert) or exits 3."""
    doc = copy.deepcopy(base_doc())
    paths = _leaves(doc, str)
    edits = data.draw(st.lists(st.tuples(st.sampled_from(paths), HOSTILE_TEXT), max_size=12))
    for path, text in edits:
        node: Any = doc
        for key in path:
            node = node[key]
        _set(doc, path, data.draw(st.sampled_from([node + text, text + node, text])))
    for run in doc["studies"][0]["runs"]:  # the names the table shows: always hostile
        for ops in run["top_ops"].values():
            for op in ops:
                op["name"] = op["name"] + data.draw(HOSTILE_TEXT)
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(doc, tmp, "study.json")
        _check(*_cli(["report", path, "-f", fmt, "-o", "-"]), fmt, {0, 3})


@settings(
    max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
@given(data=st.data(), fmt=st.sampled_from(["table", "markdown", "json"]))
def nan_and_inf_in_every_number(data: st.DataObject, fmt: str) -> None:
    """Any numeric field NaN/inf/huge: report and a gated compare work or exit 3, and the gate
    exits 3 whenever a run has no step time (never 0: it never passes on no data)."""
    doc = copy.deepcopy(base_doc())
    paths = _leaves(doc, (int, float))
    steps = [p for p in paths if "step_time_s" in p or "step_times_s" in p]
    edits = data.draw(st.lists(st.tuples(st.sampled_from(paths), NUMBERS), max_size=12))
    edits += data.draw(st.lists(st.tuples(st.sampled_from(steps), NUMBERS), max_size=3))
    for path, value in edits:
        _set(doc, path, value)
    with tempfile.TemporaryDirectory() as tmp:
        bad = _write(doc, tmp, "bad.json")
        good = _write(base_doc(), tmp, "good.json")
        _check(*_cli(["report", bad, "-f", fmt, "-o", "-"]), fmt, {0, 3})
        gate = ["--fail-on-regression", "5", "-f", fmt]
        for before, after in ((good, bad), (bad, good)):
            code, out, err = _cli(["compare", before, after, *gate])
            _check(code, out, err, fmt, {0, 1, 3})
            if any(no_data(r) for r in doc["studies"][0]["runs"]):
                assert code == 3, (code, err, [no_data(r) for r in doc["studies"][0]["runs"]])


if __name__ == "__main__":
    control_characters_in_every_string()
    nan_and_inf_in_every_number()
    print("hostile output properties held")
