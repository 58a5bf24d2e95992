"""Number and label formatting shared by every renderer, so all formats print the same text."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

CATEGORY_LABELS: dict[str, str] = {
    "compute": "Compute",
    "memcpy": "Memory copies",
    "communication": "Communication",
    "dataloader": "Data loading",
    "sync": "Synchronization",
    "reduction": "Reduction",
    "host": "Host overhead",
    "idle": "Idle",
    # a serial-fraction part of its own: time a pipeline stage runs only p2p transfers
    "pipeline_bubble": "Pipeline bubble",
    # and time the all-to-alls of expert parallelism run alone, waiting for the busiest expert
    "expert_imbalance": "Expert load imbalance",
}

COLLECTIVE_LABELS: dict[str, str] = {
    "allreduce": "AllReduce",
    "allgather": "AllGather",
    "reducescatter": "ReduceScatter",
    "broadcast": "Broadcast",
    "alltoall": "AllToAll",
    "sendrecv": "SendRecv",
    "barrier": "Barrier",
    "other": "Other collectives",
}

DASH = "–"


def label(category: str) -> str:
    """Plain-words name of a category or collective (unknown names pass through)."""
    return CATEGORY_LABELS.get(category, COLLECTIVE_LABELS.get(category, category))


def num(value: Any) -> float | None:
    """A finite float, or None for null/NaN/inf/non-numbers (documents may hold any of them)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def secs(value: Any) -> str:
    """Seconds as a readable duration: 1.23 s, 14.0 ms, 850 µs, <1 µs."""
    v = num(value)
    if v is None:
        return DASH
    a = abs(v)
    if a >= 1.0:
        return f"{v:.3g} s" if a < 100 else f"{v:.0f} s"
    if a >= 0.9995e-3:
        return f"{v * 1e3:.1f} ms"
    if a == 0.0:
        return "0 ms"
    if a < 0.5e-6:
        return "<1 µs" if v > 0 else ">-1 µs"
    return f"{v * 1e6:.0f} µs"


def signed_secs(value: Any) -> str:
    """A duration change with its sign: +3.2 ms, -120.0 ms."""
    v = num(value)
    if v is None:
        return DASH
    return ("+" if v > 0 else "-" if v < 0 else "±") + secs(abs(v))


def pct(fraction: Any, digits: int = 1) -> str:
    """A fraction as a percentage: 0.314 -> 31.4%."""
    v = num(fraction)
    return DASH if v is None else f"{v * 100:.{digits}f}%"


def signed_pct(percent: Any) -> str:
    """A value already in percent, with its sign: +4.2%."""
    v = num(percent)
    return DASH if v is None else f"{v:+.1f}%"


def times(value: Any) -> str:
    """A speedup or ratio to three meaningful digits: 0.97x, 3.21x, 12.8x, 174x, 2,765x."""
    v = num(value)
    if v is None:
        return DASH
    a = abs(v)
    if a < 9.995:
        return f"{v:.2f}x"
    if a < 99.95:
        return f"{v:.1f}x"
    return f"{v:,.0f}x"


CAP_LIMIT = 1000.0


def cap(share: Any) -> str:
    """The speedup ceiling a serial share implies alone (1/share), or 'none' when negligible.

    Above 1000x a ceiling is no ceiling for any job one would profile, and digits like
    116092.4x only say the share is tiny, so they read as "none (>1,000x)".
    """
    v = num(share)
    if v is None:
        return DASH
    if v <= 0 or 1.0 / v > CAP_LIMIT:
        return f"none (>{CAP_LIMIT:,.0f}x)" if v > 0 else "none"
    return times(1.0 / v)


def fixed(value: Any, digits: int = 3) -> str:
    """A plain number with fixed decimals, or a dash when absent."""
    v = num(value)
    return DASH if v is None else f"{v:.{digits}f}"


def interval(ci: Any, fmt: Any = secs) -> str:
    """A two-element interval as '[a, b]' formatted with fmt, or a dash."""
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return DASH
    if num(ci[0]) is None or num(ci[1]) is None:
        return DASH
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]"


@dataclass(frozen=True)
class Unit:
    """What a study's world size counts: GPUs, or ranks when no run has GPU work (a CPU-only
    job run with gloo would otherwise read as "at 4 GPUs" with no GPU anywhere)."""

    name: str  # singular: "GPU" or "rank"

    def of(self, n: Any) -> str:
        """'8 GPUs' / '1 GPU' / '4 ranks'."""
        return f"{n} {self.name}" if n == 1 else f"{n} {self.name}s"

    @property
    def plural(self) -> str:
        return f"{self.name}s"


GPU = Unit("GPU")
RANK = Unit("rank")


def unit_of(study: dict[str, Any]) -> Unit:
    """Ranks when every run of the study is CPU-only (``kind`` "cpu"), else GPUs."""
    runs = study.get("runs")
    runs = runs if isinstance(runs, list) else []
    kinds = {r.get("kind") for r in runs if isinstance(r, dict)}
    return RANK if kinds == {"cpu"} else GPU


def rate(bytes_per_s: Any) -> str:
    """A bandwidth: 32.0 MB/s, 12.5 GB/s."""
    v = num(bytes_per_s)
    if v is None:
        return DASH
    for unit, scale in (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.3g} B/s"


def params(p: Any) -> str:
    """Model parameters in their units: 'a=3.1 ms, s=5.5 ms', 'alpha=163 µs, bandwidth=32 MB/s'.

    Terms at exactly zero (not part of the chosen form) and absent values are left out; a
    model whose terms are all zero shows its first one, so the cell is never empty.
    """
    if not isinstance(p, dict):
        return DASH
    shown: list[str] = []
    zeros: list[str] = []
    for k, v in p.items():
        f = num(v)
        if f is None:
            continue
        name = str(k)
        if name.endswith("bytes_per_s"):
            text = f"{name.removesuffix('_bytes_per_s')}={rate(f)}"
        elif name.endswith("_s") or name in ("a", "b", "c", "s"):
            text = f"{name.removesuffix('_s')}={secs(f)}"
        else:
            text = f"{name}={f:.3g}"
        (zeros if f == 0 else shown).append(text)
    if not shown and zeros:
        shown = zeros[:1]
    return ", ".join(shown) if shown else DASH


def cell(value: Any) -> str:
    """Generic cell text for keys this version does not know: numbers compact, lists joined."""
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(cell(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={cell(v)}" for k, v in value.items())
    return str(value)


def mesh(dims: Any) -> str:
    """One run's parallelism mesh (``runs[i].mesh`` entries) in words: ``TP 2 (inside a node)
    x DP 4 (grows, inside a node)``, an interleaved pipeline ``PP 4 (inferred, 2 virtual chunks
    per stage, ...)``; ``none`` without a dimension."""
    parts = []
    for d in dims if isinstance(dims, list) else []:
        if not isinstance(d, dict):
            continue
        size = d.get("size")
        notes = [
            w for w, on in (("grows", d.get("grows")), ("inferred", d.get("size_inferred"))) if on
        ]
        if d.get("virtual_chunks"):  # interleaved 1F1B: model chunks per rank
            notes.append(f"{d['virtual_chunks']} virtual chunks per stage")
        span = d.get("spans_nodes")
        if span is not None:
            notes.append("across nodes" if span else "inside a node")
        named = f"{d.get('dimension')} {size if size is not None else '?'}"
        if d.get("group"):
            named += f" [{d.get('group')}]"
        parts.append(named + (f" ({', '.join(notes)})" if notes else ""))
    return " x ".join(parts) or "none"
