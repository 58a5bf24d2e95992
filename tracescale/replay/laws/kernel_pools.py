"""Kernels whose names change with N: per-run kernel counts and times by launching op in,
one law per launching op for those kernels out.

Why: libraries pick kernels by shape (cuBLAS tiles, cuDNN algorithms), so as per-rank work
shrinks with N a GEMM can move from one kernel name to another. A law per kernel name then
fits a group whose members come and go: one name's time falls faster than the work (its
kernels leave), another's grows (they arrive), and each law extrapolates nonsense (a Megatron
study: one tile fitted ``a`` with a cross-validated error of 145%). The work itself still
scales; its launching op (the host gap before the launch call) groups it stably.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tracescale.replay.graph.build import DEV, Graph
from tracescale.replay.laws.nodes import Law, fit_law

#: Per-step counts of one name that differ by more than this between runs: the name varies.
_COUNT_TOLERANCE = 0.05
#: Pool of varying kernels whose launch follows no host gap (another call came first).
NO_OP = "kernel-pool:"


@dataclass(frozen=True)
class KernelTables:
    """Per step of one run: each kernel group's count, and its time per launching op."""

    count: dict[str, float]
    by_op: dict[tuple[str, str], float]


def kernel_tables(graph: Graph, steps: npt.NDArray[np.bool_], nsteps: int) -> KernelTables:
    """Counts and times per step over the nodes of the kept steps (``steps``: per node)."""
    sel = np.flatnonzero(steps & (graph.kind == DEV) & (graph.dur > 0))
    groups = graph.group[sel].astype(np.int64)
    ng = len(graph.groups)
    cnt = np.bincount(groups, minlength=ng) / max(nsteps, 1)
    dep = graph.dep[sel].astype(np.int64)
    dep_group = np.where(dep >= 0, graph.group[np.clip(dep, 0, None)], ng)
    names = (*graph.groups, "")
    is_gap = np.array([s.startswith("gap:") for s in names], dtype=np.bool_)
    key = np.where(is_gap[dep_group], dep_group, ng)
    code = groups * (ng + 1) + key
    uniq, inv = np.unique(code, return_inverse=True)
    t = np.bincount(inv.reshape(-1), weights=graph.dur[sel] / 1e9) / max(nsteps, 1)
    by_op: dict[tuple[str, str], float] = {}
    for c, v in zip(uniq.tolist(), t.tolist(), strict=True):
        g, k = divmod(int(c), ng + 1)
        op = NO_OP if k == ng else "kernel-pool:" + names[k][len("gap:") :]
        by_op[(graph.groups[g], op)] = float(v)
    count = {graph.groups[g]: float(c) for g, c in enumerate(cnt.tolist()) if c > 0}
    return KernelTables(count, by_op)


def varying_names(sizes: Sequence[int], tables: Sequence[KernelTables]) -> set[str]:
    """Kernel names whose count per step changes between runs, or that are missing from a
    multi-GPU run while other runs have them (a kernel only multi-GPU runs launch, absent at
    N = 1 alone, does not vary)."""
    names = set().union(*(t.count for t in tables))
    out = set()
    for name in names:
        counts = [t.count.get(name, 0.0) for t in tables]
        present = [c for c in counts if c > 0]
        spread = max(present) > (1 + _COUNT_TOLERANCE) * min(present)
        if spread or any(c == 0 and n > 1 for n, c in zip(sizes, counts, strict=True)):
            out.add(name)
    return out


def pooled_times(
    tables: Sequence[KernelTables], varying: set[str], factors: Sequence[float]
) -> list[dict[str, float]]:
    """Per run: the time per step of the varying kernels per launching op (divided by each
    run's device factor, as kernel laws are)."""
    out = []
    for t, f in zip(tables, factors, strict=True):
        pools: dict[str, float] = {}
        for (name, op), v in t.by_op.items():
            if name in varying:
                pools[op] = pools.get(op, 0.0) + v / f
        out.append(pools)
    return out


def main_pool(table: KernelTables, name: str) -> str:
    """The launching op with most of ``name``'s time in ``table`` (the pool whose law it
    follows)."""
    best, best_t = NO_OP, -1.0
    for (n, op), v in table.by_op.items():
        if n == name and v > best_t:
            best, best_t = op, v
    return best


def varying_kernel_laws(
    sizes: Sequence[int], tables: Sequence[KernelTables], factors: Sequence[float]
) -> dict[str, Law]:
    """Per kernel name that varies with N: the law of its launching op's pool of varying
    kernels, fitted across the runs (``sizes`` ascending, the last the base run)."""
    varying = varying_names(sizes, tables)
    if not varying:
        return {}
    pools = pooled_times(tables, varying, factors)
    pool_laws = {
        op: fit_law(
            [n for n, p in zip(sizes, pools, strict=True) if op in p],
            [p[op] for p in pools if op in p],
        )
        for op in set().union(*pools)
    }
    base = tables[-1]
    return {
        name: pool_laws[main_pool(base, name)]
        for name in varying
        if name in base.count and main_pool(base, name) in pool_laws
    }
