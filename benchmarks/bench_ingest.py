"""``make bench``: ingest speed and peak memory against bare JSON decoding and HTA.

Each (case, file) runs in a fresh subprocess so its peak RSS (``VmHWM``) is its own. Figures:
best-of-N wall time, MB/s of decompressed JSON, ratio to bare ``orjson.loads``, peak RSS and the
peak added over the interpreter after imports. To add a case (classify, ``--jobs``), append a
:class:`Case` to :data:`CASES`; it gets the file path and its decompressed bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "hta"
FILES: list[Path] = [
    _TRACES / "df_index_resolver" / "df_index_resolver.json.gz",
    _TRACES / "ns_resolution_trace" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
]
TARGET_VS_ORJSON = 1.0
TARGET_VS_HTA = 10.0
TARGET_RSS_VS_JSON = 2.0
#: The memory goal for one large rank file: the whole process's peak RSS at most twice its
#: JSON plus this allowance (interpreter, numpy, numba's code).
RSS_ALLOWANCE = 300_000_000


@dataclass(frozen=True)
class Case:
    """One thing to time: ``run(path, json_bytes)``; ``setup`` imports, untimed (None = skip)."""

    name: str
    run: Callable[[str, Any], object]
    available: Callable[[], str | None] = lambda: None  # reason to skip, or None
    needs_bytes: bool = False  # the decompressed bytes are read (untimed) before the run
    #: Imports done before the baseline RSS is taken: code is not per-byte memory.
    setup: Callable[[], object] = lambda: None


def _orjson(path: str, data: Any) -> object:
    import orjson

    return orjson.loads(data)


def _msgspec(path: str, data: Any) -> object:
    import msgspec

    return msgspec.json.decode(data)


def _tracescale(path: str, data: Any) -> object:
    from tracescale.ingest.decode import load_trace
    from tracescale.ingest.steps import find_steps

    trace = load_trace(path)
    return trace, find_steps(trace)


def _map_step(path: str, data: Any) -> object:
    """What a worker does per rank file: ingest and classify."""
    from tracescale.classify.rank import classify_rank
    from tracescale.classify.rules import load_rules
    from tracescale.ingest.decode import load_trace

    return classify_rank(load_trace(path), load_rules())


def _analyze(path: str, data: Any) -> object:
    """The whole ``analyze`` of the file as a study of its own (world size 1): map step, run
    breakdown, closed-form scaling, and the replay stage (the rank's trace read again and its
    execution graph built and replayed for ``replay_error``); cold, one process."""
    from tracescale.pipeline import analyze

    return analyze(path, jobs=1, no_cache=True)


def _analyze_imports() -> None:
    import scipy.stats  # noqa: F401  (the scaling fits)

    import tracescale.pipeline
    import tracescale.replay.apply
    import tracescale.replay.project  # noqa: F401


def _hta_missing() -> str | None:
    try:
        import hta  # noqa: F401
    except ImportError:
        return "hta not installed (pip install traceinsight, the hta extra)"
    return None


def _hta(path: str, data: Any) -> object:
    import shutil
    import tempfile

    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as tmp:  # HTA wants a folder of rank files
        shutil.copy(path, os.path.join(tmp, "rank-0.json.gz"))
        return TraceAnalysis(trace_dir=tmp)


#: Benchmark cases, in report order. The first is the baseline ratios are taken against.
CASES: list[Case] = [
    Case("orjson.loads (bytes)", _orjson, needs_bytes=True),
    Case("msgspec.json.decode (bytes)", _msgspec, needs_bytes=True),
    Case("tracescale load_trace+find_steps (file)", _tracescale),
    Case("tracescale ingest+classify (file)", _map_step),
    Case("tracescale analyze (file)", _analyze, setup=_analyze_imports),
    Case("HTA TraceAnalysis (file)", _hta, available=_hta_missing),
]


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _child(case_name: str, path: str, repeat: int) -> None:
    """Run one case in this (fresh) process and print a JSON line of figures."""
    import gc

    from tracescale.ingest.decode import read_bytes

    case = next(c for c in CASES if c.name == case_name)
    json_size = len(read_bytes(path))
    if case.name.startswith("tracescale"):
        from tracescale.ingest.fast import warm_up

        warm_up()  # as analyze does for big studies; its ~100 MB of code is not per-byte
    case.setup()
    gc.collect()
    base = _rss_kb("VmRSS")
    data = read_bytes(path) if case.needs_bytes else None
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = case.run(path, data)
        times.append(time.perf_counter() - t0)
        del result
        gc.collect()
    out = {"seconds": min(times), "json_bytes": json_size, "base_kb": base}
    out["peak_kb"] = _rss_kb("VmHWM")
    print(json.dumps(out))


def _env() -> dict[str, str]:
    """Children write and reuse bytecode (an installed package has its ``.pyc`` files), in a
    folder of their own rather than beside the sources."""
    import tempfile

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "tracescale-bench-pycache")
    return env


def _measure(case: Case, path: Path, repeat: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", case.name, str(path)]
    proc = subprocess.run(
        [*cmd, "--repeat", str(repeat)], capture_output=True, text=True, check=False, env=_env()
    )
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    """Run every case on every file and print the table; always exits 0 (a script, not a test)."""
    parser = argparse.ArgumentParser(prog="python benchmarks/bench_ingest.py")
    parser.add_argument("files", nargs="*", type=Path, default=FILES)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument(
        "--large-gb",
        type=float,
        default=0.0,
        help="Instead: ingest one generated trace of about this many GB of JSON.",
    )
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, str(args.files[0]), args.repeat)
        return 0
    if args.large_gb > 0:
        return _large(args.large_gb)
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title=f"tracescale ingest benchmark (best of {args.repeat})")
    for col in ("file", "case", "s", "MB/s", "x orjson", "peak RSS MB", "added MB", "x JSON"):
        table.add_column(col, justify="left" if col in ("file", "case") else "right")
    notes: list[str] = []
    for path in args.files:
        if not path.exists():
            notes.append(f"{path}: missing (../shared/traces is beside the checkout in CI)")
            continue
        base_s = None
        rows: dict[str, dict[str, Any]] = {}
        for case in CASES:
            reason = case.available()
            if reason:
                notes.append(f"{case.name}: skipped: {reason}")
                continue
            r = _measure(case, path, args.repeat)
            rows[case.name] = r
            if "error" in r:
                table.add_row(path.parent.name, case.name, "error", r["error"][:60])
                continue
            base_s = base_s or r["seconds"]
            mb = r["json_bytes"] / 1e6
            added = (r["peak_kb"] - r["base_kb"]) / 1024
            table.add_row(
                path.parent.name,
                case.name,
                f"{r['seconds']:.3f}",
                f"{mb / r['seconds']:.0f}",
                f"{r['seconds'] / base_s:.2f}",
                f"{r['peak_kb'] / 1024:.0f}",
                f"{added:.0f}",
                f"{added * 1024 * 1024 / r['json_bytes']:.2f}",
            )
        notes.extend(_verdict(path.parent.name, rows))
    console.print(table)
    console.print(
        f"Targets: ingest <= {TARGET_VS_ORJSON}x orjson, >= {TARGET_VS_HTA}x faster than HTA, "
        f"peak RSS added <= {TARGET_RSS_VS_JSON}x the JSON size."
    )
    for note in dict.fromkeys(notes):
        console.print(f"- {note}")
    return 0


def _large(gigabytes: float) -> int:
    """Generate one simulated rank of ~``gigabytes`` of JSON; in fresh processes, its map step
    (ingest + classify) and the whole ``analyze`` of it as a one-file study (world size 1).

    Shows that a file far larger than the tests' is analyzed without a second copy: the peak
    added memory is compared with the JSON size (one copy of the JSON is 1.0x); the whole
    analyze is what a user runs, and the replay stage decodes the rank once more.
    """
    import tempfile

    from tracescale.ingest.decode import read_bytes
    from tracescale.simulate import make_params, simulate

    with tempfile.TemporaryDirectory(prefix="tracescale-large-") as tmp:
        params = make_params({"layers": 2000})
        probe = Path(tmp) / "probe"
        simulate([1], probe, steps=2, seed=0, params=params)
        per_step = len(read_bytes(str(next((probe / "ws1").iterdir())))) / 2
        steps = max(int(gigabytes * 1e9 / per_step), 1)
        t0 = time.perf_counter()
        simulate([1], Path(tmp) / "big", steps=steps, seed=0, params=params)
        made = time.perf_counter() - t0
        path = next((Path(tmp) / "big" / "ws1").iterdir())
        rows = {
            name: _measure(next(c for c in CASES if c.name.startswith(name)), path, 1)
            for name in ("tracescale ingest+classify", "tracescale analyze")
        }
    first = next(iter(rows.values()))
    if "json_bytes" in first:
        gb = first["json_bytes"] / 1e9
        print(f"large trace: {gb:.2f} GB of JSON ({steps} steps, generated in {made:.0f} s)")
    for name, r in rows.items():
        if "error" in r:
            print(f"  {name}: error: {r['error']}")
            continue
        gb = r["json_bytes"] / 1e9
        added = (r["peak_kb"] - r["base_kb"]) * 1024
        x = added / r["json_bytes"]
        allowed = 2 * r["json_bytes"] + RSS_ALLOWANCE
        peak = r["peak_kb"] * 1024
        verdict = "OK" if peak <= allowed else "MISSED"
        print(
            f"  {name}: {r['seconds']:.1f} s ({gb * 1e3 / r['seconds']:.0f} MB/s); peak RSS "
            f"{peak / 1e9:.2f} GB, added {added / 1e9:.2f} GB = {x:.2f}x the JSON; "
            f"peak / (2x JSON + {RSS_ALLOWANCE / 1e6:.0f} MB): {peak / allowed:.2f}x "
            f"(target <= 1.0x) {verdict}"
        )
    return 0


def _verdict(label: str, rows: dict[str, dict[str, Any]]) -> list[str]:
    ours = rows.get(CASES[2].name, {})
    base = rows.get(CASES[0].name, {})
    hta = rows.get(CASES[-1].name, {})
    if "seconds" not in ours or "seconds" not in base:
        return []
    ratio = ours["seconds"] / base["seconds"]
    rss = (ours["peak_kb"] - ours["base_kb"]) * 1024 / ours["json_bytes"]
    out = [
        f"{label}: ingest {ratio:.2f}x orjson "
        f"({'meets' if ratio <= TARGET_VS_ORJSON else 'MISSES'} <= {TARGET_VS_ORJSON}x); "
        f"peak RSS added {rss:.2f}x JSON "
        f"({'meets' if rss <= TARGET_RSS_VS_JSON else 'MISSES'} <= {TARGET_RSS_VS_JSON}x)"
    ]
    if "seconds" in hta:
        speed = hta["seconds"] / ours["seconds"]
        verdict = "meets" if speed >= TARGET_VS_HTA else "MISSES"
        out.append(f"{label}: {speed:.1f}x faster than HTA ({verdict} >= {TARGET_VS_HTA}x)")
    return out


if __name__ == "__main__":
    sys.exit(main())
