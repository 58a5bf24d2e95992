"""Replay benchmark: the projection stage's share of a cold ``analyze``, as a ratio in one run.

``python benchmarks/bench_replay.py`` (``make bench``) writes a ``tracescale simulate`` study
(runs at 8 and 64 ranks, as ``bench_scale.py``'s), then, in one fresh process with the cache
off and one job, analyzes it while timing each pipeline stage it passes through: the map
(ingest + classify of every rank file), the closed-form scaling fit, and the projection stage
(``pipeline._replay``: re-reading the representative ranks, building and replaying their
graphs, fitting the laws, projecting every requested N and the curve). It prints the stages and
``projection stage / rest of cold analyze`` against its target (at most 0.25: the projection may
add at most 25% to a cold analyze). The ratio is taken inside one run, so machine load cancels
to first order; ``--repeat`` keeps the run with the smallest total.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET = 0.25


def _child(path: str, project: list[int]) -> dict[str, float]:
    """One cold analyze in this process, each stage timed by wrapping its function."""
    import tracescale.pipeline as pipeline

    spent: dict[str, float] = {"map": 0.0, "scaling": 0.0, "projection": 0.0}

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - t0

        return wrapper

    pipeline.run_tasks = timed("map", pipeline.run_tasks)  # type: ignore[assignment]
    pipeline.analyze_scaling = timed("scaling", pipeline.analyze_scaling)  # type: ignore[assignment]
    pipeline._replay = timed("projection", pipeline._replay)  # type: ignore[assignment]
    t0 = time.perf_counter()
    study = pipeline.analyze(path, jobs=1, no_cache=True, project=project)
    spent["total"] = time.perf_counter() - t0
    sc = study.studies[0]["scaling"]
    spent["replayed"] = float("replay" in sc)
    return spent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/bench_replay.py", description=__doc__)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--ranks", type=int, default=64, help="large run's ranks (default 64)")
    ap.add_argument("--small", type=int, default=8, help="small run's ranks (default 8)")
    ap.add_argument("--steps", type=int, default=8, help="profiled steps per rank")
    ap.add_argument("--layers", type=int, default=200, help="simulated layers (trace size)")
    ap.add_argument("--project", default="128,512,1024", help="world sizes to project")
    ap.add_argument("--repeat", type=int, default=1, help="runs (the fastest total is kept)")
    ap.add_argument("--dir", help="reuse/keep the study here instead of a temp dir")
    ap.add_argument(
        "--pipeline",
        action="store_true",
        help="a 4-stage pipeline with 32 microbatches per step, measured at 2, 4 and 8 "
        "replicas (N = 8, 16, 32) and projected to 64, 128, 256, instead of the DDP study",
    )
    args = ap.parse_args(argv)
    if args.pipeline:
        args.project = "64,128,256" if args.project == "128,512,1024" else args.project
    project = [int(x) for x in args.project.split(",")]
    if args.child:
        print(json.dumps(_child(args.child, project)))
        return 0
    tmp = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="tracescale-replay-"))
    sizes = [8, 16, 32] if args.pipeline else [args.small, args.ranks]
    try:
        if not (tmp / f"ws{sizes[-1]}").is_dir():
            from tracescale.simulate import make_params, pattern_params, simulate

            if args.pipeline:
                params = pattern_params("pp", {"pp_stages": 4, "microbatches": 32})
                simulate(sizes, tmp, steps=args.steps, params=params, pattern="pp", truth_at=[])
            else:
                params = make_params({"layers": args.layers})
                simulate(sizes, tmp, steps=args.steps, params=params)
        best: dict[str, float] | None = None
        for _ in range(max(args.repeat, 1)):
            cmd = [sys.executable, __file__, "--child", str(tmp), "--project", args.project]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            row = json.loads(out.strip().splitlines()[-1])
            if best is None or row["total"] < best["total"]:
                best = row
        assert best is not None
        if not best["replayed"]:
            print("  projection stage / rest of cold analyze: n/a (the study was not replayed)")
            return 1
        rest = best["total"] - best["projection"]
        ratio = best["projection"] / rest if rest > 0 else float("inf")
        print(
            f"cold analyze of {tmp.name} ({'+'.join(map(str, sizes))} ranks"
            f"{', 4-stage pipeline, 32 microbatches' if args.pipeline else ''}, "
            f"{args.steps} steps, "
            f"--project {args.project}): total {best['total']:.2f} s; map {best['map']:.2f} s, "
            f"closed-form scaling {best['scaling']:.2f} s, projection {best['projection']:.2f} s"
        )
        verdict = "OK" if ratio <= TARGET else "MISSED"
        print(
            f"  projection stage / rest of cold analyze: {ratio:.2f}x "
            f"(target <= {TARGET}x) {verdict}"
        )
    finally:
        if not args.dir:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
