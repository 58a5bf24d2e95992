"""Shape benchmark: the work of ``analyze`` stays linear in the events whatever their shape.

``python benchmarks/bench_shapes.py`` (``make bench``) writes one workload (the units of
``tests/linear_work_traces.py``: a host op launching a kernel, a data-loading annotation and a
stream sync every other unit) in its common shape (a few steps, one stream, one process group)
and spread over many GPU streams, many steps or many process groups, then prints, for each
shape, the CPU time of one ``analyze`` (one job, no cache) of the spread layout over the common
one, against its target (at most 3x). Two more rows double the spread shape's units: a linear
cost doubles (2x), a quadratic one quadruples.

CPU time of this process (``time.process_time``), best of ``--repeat``, after a warm-up analyze
(imports, the compiled replay loop), so other processes on the machine move the ratio little.
Measured before the per-stream and per-step searches were made linear: 10,000 streams cost
4.0x one stream, 12,000 steps 4.7x four steps.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.linear_work_traces import FEW_STEPS, write_study
from tracescale.api import analyze

#: Most a shape may cost over the common shape of the same units.
MAX_RATIO = 3.0
#: Most doubling the units of a spread shape may cost (linear: 2, quadratic: 4).
MAX_DOUBLING = 2.6


def _cpu_seconds(path: Path, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        analyze(path, jobs=1, no_cache=True, progress=False)
        best = min(best, time.process_time() - t)
    return best


def _verdict(name: str, value: float, target: float) -> str:
    ok = value <= target
    return f"  {name}: {value:.2f}x (target <= {target}x) {'OK' if ok else 'MISSED'}"


def _few(key: str) -> str:
    return "1 stream" if key == "streams" else f"{FEW_STEPS} steps"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/bench_shapes.py", description=__doc__)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every case's units")
    ap.add_argument("--repeat", type=int, default=2, help="runs per case (best kept)")
    args = ap.parse_args(argv)
    # (shape, its units, the key it spreads over); streams and steps spread one unit to each
    units_of = {"streams": 10_000, "steps": 12_000, "groups": 600}
    missed = 0
    with tempfile.TemporaryDirectory(prefix="tracescale-shapes-") as tmp:
        root = Path(tmp)
        _cpu_seconds(write_study(root / "warm", 100), 1)
        print(f"shape cost, CPU seconds of one analyze (best of {args.repeat} runs)")
        for key, full in units_of.items():
            units = max(2, int(full * args.scale))
            spread = {key: 600 if key == "groups" else units}
            common = {"groups": 1} if key == "groups" else {}
            base = _cpu_seconds(write_study(root / f"c-{key}", units, **common), args.repeat)
            wide = _cpu_seconds(write_study(root / f"s-{key}", units, **spread), args.repeat)
            name = f"{spread[key]:,} {key} / {'1 group' if key == 'groups' else _few(key)}"
            line = _verdict(name, wide / base, MAX_RATIO)
            print(f"{line}  ({wide:.2f} s / {base:.2f} s)")
            missed += line.endswith("MISSED")
            if key == "groups":
                continue
            twice = _cpu_seconds(write_study(root / f"d-{key}", 2 * units, **{key: 2 * units}),
                                 args.repeat)  # fmt: skip
            line = _verdict(f"{2 * units:,} {key} / {units:,} {key}", twice / wide, MAX_DOUBLING)
            print(f"{line}  ({twice:.2f} s / {wide:.2f} s)")
            missed += line.endswith("MISSED")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
