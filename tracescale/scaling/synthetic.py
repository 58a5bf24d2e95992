"""RunBreakdowns from a closed-form model, for tests and benchmarks (no traces involved).

Per rank and step at world size N (strong mode; weak mode drops every ``/N``):
``t_c = serial[c] + parallel[c]/N``; communication = ``max(0, X(N) - W(N)) + comm_residual``
with ``X(N)`` the ring AllReduce of each bucket (``2(N-1) alpha + 2(N-1)/N bytes/bw``, none at
N=1) and ``W(N) = overlap/N`` the backward compute left to hide it. The columns are filled
the way the classifier defines them (``overlap_window = min(W, X)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracescale.categories import CATEGORIES
from tracescale.classify.result import CAUSED, COLLECTIVE_COLUMNS, STEP_COLUMNS, RunBreakdown


@dataclass(frozen=True)
class Synth:
    """Parameters of the closed-form study (seconds, bytes, bytes/s)."""

    serial: Mapping[str, float] = field(
        default_factory=lambda: {"compute": 0.02, "sync": 0.01, "reduction": 0.004, "host": 0.006}
    )
    parallel: Mapping[str, float] = field(
        default_factory=lambda: {"compute": 0.8, "memcpy": 0.04, "dataloader": 0.1}
    )
    comm_residual: float = 0.0
    buckets: Sequence[int] = ()
    alpha_s: float = 2e-5
    bandwidth: float = 10e9
    overlap: float = 0.0
    mode: str = "strong"
    jitter: float = 0.0
    steps: int = 5

    def div(self, n: float) -> float:
        return n if self.mode == "strong" else 1.0

    def transfer(self, n: float) -> float:
        """Summed ring AllReduce time of all buckets at N (0 at N=1)."""
        if n <= 1:
            return 0.0
        return sum(
            2 * (n - 1) * self.alpha_s + 2 * (n - 1) / n * b / self.bandwidth for b in self.buckets
        )

    def breakdown(self, n: float) -> dict[str, float]:
        """Exact mean seconds per step per category at N."""
        out = {
            c: self.serial.get(c, 0.0) + self.parallel.get(c, 0.0) / self.div(n) for c in CATEGORIES
        }
        x = self.transfer(n)
        out["communication"] = (
            max(0.0, x - self.overlap / self.div(n)) * (x > 0) + self.comm_residual
        )
        return out

    def step_time(self, n: float) -> float:
        return float(sum(self.breakdown(n).values()))

    def speedup(self, n: float, base: float = 1.0) -> float:
        k = n / base if self.mode == "weak" else 1.0
        return k * self.step_time(base) / self.step_time(n)

    def serial_fraction(self) -> float:
        """Strong: serial parts over T(1); weak: serial categories + serial compute over T(1)."""
        if self.mode == "strong":
            return sum(self.serial.values()) / self.step_time(1)
        ser = {"sync", "reduction", "host", "idle"}
        s = sum(v for c, v in self.breakdown(1).items() if c in ser) + self.serial.get(
            "compute", 0.0
        )
        return s / self.step_time(1)


def run(p: Synth, n: int, seed: int = 0) -> RunBreakdown:
    """One RunBreakdown at world size ``n`` (jitter is seeded by ``seed`` and ``n``)."""
    rng = np.random.default_rng([seed, n])
    exact = p.breakdown(n)
    x = p.transfer(n)
    w = p.overlap / p.div(n) if x > 0 else 0.0
    rows, colls = [], []
    for rank in range(n):
        t0 = 0.0
        for step in range(p.steps):
            noise = 1.0 + p.jitter * rng.standard_normal(len(CATEGORIES) + 1)
            cats = {c: max(exact[c] * noise[i], 0.0) for i, c in enumerate(CATEGORIES)}
            dur = sum(cats.values())
            xs = x * max(noise[-1], 0.0)
            row = {
                "rank": rank,
                "step": step,
                "start": t0,
                "duration": dur,
                **cats,
                "overlapped_communication": min(xs, w),
                "communication_wait": 0.0,
                "comm_transfer": xs,
                "overlap_window": min(w, xs),
                "serial_compute": p.serial.get("compute", 0.0)
                * (noise[0] if cats["compute"] else 0),
                **{f"caused_{c}": 0.0 for c in CAUSED},
            }
            rows.append(row)
            for k, b in enumerate(p.buckets if n > 1 else ()):
                tr = (2 * (n - 1) * p.alpha_s + 2 * (n - 1) / n * b / p.bandwidth) * max(
                    noise[-1], 0.0
                )
                colls.append(
                    {
                        "rank": rank,
                        "step": step,
                        "collective": "allreduce",
                        "seq": step * 1000 + k,
                        "bytes": int(b),
                        "group_size": n,
                        "start": t0,
                        "duration": tr,
                        "transfer": tr,
                        "wait": 0.0,
                        "exposed": tr * cats["communication"] / xs if xs > 0 else 0.0,
                    }
                )
            t0 += dur
    steps = pd.DataFrame(rows, columns=list(STEP_COLUMNS))
    coll = pd.DataFrame(colls, columns=list(COLLECTIVE_COLUMNS))
    return RunBreakdown(n, tuple(range(n)), (), steps, coll, {"allreduce": exact["communication"]})


def study(p: Synth, sizes: Sequence[int] = (1, 2, 4, 8), seed: int = 0) -> list[RunBreakdown]:
    return [run(p, n, seed) for n in sizes]
