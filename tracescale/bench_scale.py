"""Scale benchmark: time and peak memory of ``analyze`` on a large simulated study.

``python -m tracescale.bench_scale`` writes ``tracescale simulate`` runs at 8 and 64 ranks to a
temp dir, then runs each case in a fresh subprocess (so its peak RSS is its own): ``--jobs 1``
vs ``--jobs 2`` cold, cold vs cached, 8 vs 64 ranks, and HTA's ``TraceAnalysis`` load of the
8-rank run when ``hta`` imports. "map" is the per-rank ingest+classify phase (``run_tasks``);
"wall" is the whole ``analyze`` (discovery, map, cross-rank merge, scaling fits).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_JOBS = 1.7
TARGET_CACHE = 20.0
TARGET_RSS = 1.2
TARGET_HTA = 10.0
MB = 1024 * 1024


def _vmhwm() -> int:
    from tracescale.parallel.pool import peak_rss

    return peak_rss()


def _child_analyze(spec: dict[str, Any]) -> dict[str, Any]:
    """One ``analyze`` in this (fresh) process; spies on run_tasks for the map phase."""
    import tracescale.pipeline as pipeline
    from tracescale.parallel import MapResult, run_tasks

    seen: list[MapResult] = []
    times: list[float] = []
    map_rss: list[int] = []
    original = run_tasks

    def spy(*args: Any, **kwargs: Any) -> MapResult:
        t0 = time.perf_counter()
        out = original(*args, **kwargs)
        times.append(time.perf_counter() - t0)
        map_rss.append(_vmhwm())
        seen.append(out)
        return out

    pipeline.run_tasks = spy  # type: ignore[assignment,attr-defined]
    t0 = time.perf_counter()
    pipeline.analyze(
        spec["path"],
        jobs=spec["jobs"],
        cache_dir=spec.get("cache_dir"),
        no_cache=spec.get("no_cache", False),
        scheduler=spec.get("scheduler"),
    )
    wall = time.perf_counter() - t0
    worker = max((m.worker_peak_rss for m in seen), default=0)
    return {
        "wall": wall,
        "map": sum(times),
        "parent_rss": _vmhwm(),
        "parent_map_rss": max(map_rss, default=0),
        "worker_rss": worker,
        "cached": sum(m.cached for m in seen),
        "computed": sum(m.computed for m in seen),
    }


def _child_hta(spec: dict[str, Any]) -> dict[str, Any]:
    """HTA's TraceAnalysis load of a folder of rank files (its own worker pool included)."""
    import resource

    from hta.trace_analysis import TraceAnalysis

    # HTA's rank sniffing wants `"rank": N` with a space (compact JSON reads as rank 0 for
    # all files), so it is handed the rank -> file map that tracescale's discovery finds.
    files = sorted(Path(spec["path"]).glob("*.json.gz"))
    t0 = time.perf_counter()
    analysis = TraceAnalysis(trace_files=dict(enumerate(map(str, files))), trace_dir=spec["path"])
    wall = time.perf_counter() - t0
    loaded = len(analysis.t.get_all_traces())
    if loaded != len(files):
        raise RuntimeError(f"HTA loaded {loaded} of {len(files)} ranks")
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return {"wall": wall, "map": wall, "parent_rss": _vmhwm(), "worker_rss": kids}


def _run_child(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "tracescale.bench_scale", "--child", json.dumps(spec)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail) or f"exit {proc.returncode}"}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _hta_missing() -> str | None:
    try:
        import hta.trace_analysis  # noqa: F401
    except Exception as exc:
        return f"hta does not import ({type(exc).__name__}); pip install 'tracescale[hta]'"
    return None


def _generate(root: Path, ranks: list[int], steps: int, layers: int) -> dict[int, Path]:
    from tracescale.simulate import make_params, simulate

    simulate(ranks, root, steps=steps, params=make_params({"layers": layers}), compresslevel=1)
    return {n: root / f"ws{n}" for n in ranks}


def _sizes(folder: Path) -> tuple[int, int]:
    """(bytes on disk, decompressed JSON bytes from the gzip trailers)."""
    disk = raw = 0
    for f in folder.glob("*.json.gz"):
        disk += f.stat().st_size
        with open(f, "rb") as fh:
            fh.seek(-4, os.SEEK_END)
            raw += int.from_bytes(fh.read(4), "little")
    return disk, raw


def _fmt(row: dict[str, Any], key: str, scale: float = 1.0, digits: int = 2) -> str:
    value = row.get(key)
    return "-" if not value else f"{value / scale:.{digits}f}"


def _ratio(name: str, num: float | None, den: float | None, target: float, *, le: bool) -> str:
    if not num or not den:
        return f"  {name}: n/a"
    r = num / den
    ok = r <= target if le else r >= target
    op = "<=" if le else ">="
    return f"  {name}: {r:.2f}x (target {op} {target}x) {'OK' if ok else 'MISSED'}"


def main(argv: list[str] | None = None) -> int:
    """Generate the study, run every case, print the table and the ratios to the targets."""
    ap = argparse.ArgumentParser(prog="python -m tracescale.bench_scale", description=__doc__)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--ranks", type=int, default=64, help="large run's ranks (default 64)")
    ap.add_argument("--small", type=int, default=8, help="small run's ranks (default 8)")
    ap.add_argument("--steps", type=int, default=8, help="profiled steps per rank")
    ap.add_argument("--layers", type=int, default=200, help="simulated layers (trace size)")
    ap.add_argument("--dir", help="reuse/keep the study here instead of a temp dir")
    ap.add_argument("--no-hta", action="store_true", help="skip HTA even if it imports")
    ap.add_argument("--timeout", type=float, default=900, help="per case, seconds")
    args = ap.parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        out = _child_hta(spec) if spec["kind"] == "hta" else _child_analyze(spec)
        print(json.dumps(out))
        return 0

    tmp = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="tracescale-bench-"))
    try:
        t0 = time.perf_counter()
        if not (tmp / f"ws{args.ranks}").is_dir():
            _generate(tmp, [args.small, args.ranks], args.steps, args.layers)
        gen = time.perf_counter() - t0
        big, small = tmp / f"ws{args.ranks}", tmp / f"ws{args.small}"
        disk, raw = _sizes(big)
        sdisk, sraw = _sizes(small)
        print(
            f"machine: {os.cpu_count()} CPUs, {platform.machine()}, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}"
        )
        print(
            f"study: {args.ranks} ranks = {disk / MB:.0f} MB gz / {raw / MB:.0f} MB JSON; "
            f"{args.small} ranks = {sdisk / MB:.0f} MB gz / {sraw / MB:.0f} MB JSON "
            f"({args.steps} steps, layers={args.layers}; generated in {gen:.0f} s) in {tmp}"
        )
        cache = str(tmp / "cache")
        shutil.rmtree(cache, ignore_errors=True)
        cases: list[tuple[str, dict[str, Any]]] = [
            (f"{args.ranks} ranks jobs=1 cold", {"path": str(big), "jobs": 1, "no_cache": True}),
            (f"{args.ranks} ranks jobs=2 cold", {"path": str(big), "jobs": 2, "cache_dir": cache}),
            (
                f"{args.ranks} ranks jobs=2 cached",
                {"path": str(big), "jobs": 2, "cache_dir": cache},
            ),
            (f"{args.small} ranks jobs=2 cold", {"path": str(small), "jobs": 2, "no_cache": True}),
            (f"{args.small} ranks jobs=1 cold", {"path": str(small), "jobs": 1, "no_cache": True}),
        ]
        rows: dict[str, dict[str, Any]] = {}
        for name, spec in cases:
            rows[name] = _run_child({"kind": "analyze", **spec}, args.timeout)
        hta_note = "skipped by --no-hta" if args.no_hta else _hta_missing()
        hta_name = f"HTA TraceAnalysis {args.small} ranks"
        if hta_note is None:
            rows[hta_name] = _run_child({"kind": "hta", "path": str(small)}, args.timeout)
        print(
            f"\n{'case':34} {'wall s':>8} {'map s':>8} {'MB/s':>7} {'parent MB':>10} "
            f"{'worker MB':>10}"
        )
        for name, row in rows.items():
            if "error" in row:
                print(f"{name:34} failed: {row['error']}")
                continue
            size = raw if name.startswith(f"{args.ranks} ") else sraw
            rate = size / MB / row["map"] if row.get("map") else 0
            print(
                f"{name:34} {_fmt(row, 'wall'):>8} {_fmt(row, 'map'):>8} {rate:7.0f} "
                f"{_fmt(row, 'parent_rss', MB, 0):>10} {_fmt(row, 'worker_rss', MB, 0):>10}"
            )
        if hta_note:
            print(f"{hta_name}: skipped: {hta_note}")
        r = {k: v for k, v in rows.items() if "error" not in v}
        j1, j2 = r.get(cases[0][0], {}), r.get(cases[1][0], {})
        cached, s2, s1 = r.get(cases[2][0], {}), r.get(cases[3][0], {}), r.get(cases[4][0], {})
        hta = r.get(hta_name, {})
        print("\ntargets:")
        print(
            _ratio(
                "jobs=2 speedup over jobs=1 (map)",
                j1.get("map"),
                j2.get("map"),
                TARGET_JOBS,
                le=False,
            )
        )
        print(
            _ratio(
                "jobs=2 speedup over jobs=1 (analyze)",
                j1.get("wall"),
                j2.get("wall"),
                TARGET_JOBS,
                le=False,
            )
        )
        print(
            _ratio(
                "cached speedup over cold (map)",
                j2.get("map"),
                cached.get("map"),
                TARGET_CACHE,
                le=False,
            )
        )
        print(
            _ratio(
                "cached speedup over cold (analyze)",
                j2.get("wall"),
                cached.get("wall"),
                TARGET_CACHE,
                le=False,
            )
        )
        print(
            _ratio(
                f"parent peak RSS {args.ranks} / {args.small} ranks (jobs=2)",
                j2.get("parent_rss"),
                s2.get("parent_rss"),
                TARGET_RSS,
                le=True,
            )
        )
        print(
            _ratio(
                f"parent peak RSS until the map ends, {args.ranks} / {args.small} ranks (jobs=2)",
                j2.get("parent_map_rss"),
                s2.get("parent_map_rss"),
                TARGET_RSS,
                le=True,
            )
        )
        print(
            _ratio(
                f"HTA load / tracescale ingest+classify, {args.small} ranks jobs=2",
                hta.get("wall"),
                s2.get("map"),
                TARGET_HTA,
                le=False,
            )
        )
        print(
            _ratio(
                f"HTA load / tracescale ingest+classify, {args.small} ranks jobs=1",
                hta.get("wall"),
                s1.get("map"),
                TARGET_HTA,
                le=False,
            )
        )
    finally:
        if not args.dir:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
