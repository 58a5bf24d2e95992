"""Number and label formatting shared by every renderer, so all formats print the same text."""

from __future__ import annotations

import math
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
}

COLLECTIVE_LABELS: dict[str, str] = {
    "allreduce": "AllReduce",
    "allgather": "AllGather",
    "reducescatter": "ReduceScatter",
    "broadcast": "Broadcast",
    "alltoall": "AllToAll",
    "sendrecv": "Send/Recv",
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
    """Seconds as a readable duration: 1.23 s, 14.0 ms, 850 µs."""
    v = num(value)
    if v is None:
        return DASH
    a = abs(v)
    if a >= 1.0:
        return f"{v:.3g} s" if a < 100 else f"{v:.0f} s"
    if a >= 1e-3:
        return f"{v * 1e3:.1f} ms"
    if a == 0.0:
        return "0 ms"
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
    """A speedup or ratio: 3.2x."""
    v = num(value)
    if v is None:
        return DASH
    return f"{v:.2f}x" if v < 10 else f"{v:.1f}x"


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


def gpus(n: Any) -> str:
    """'8 GPUs' / '1 GPU'."""
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def params(p: Any) -> str:
    """Model parameters as 'a=1.2e-03, b=0.4'."""
    if not isinstance(p, dict):
        return DASH
    out = []
    for k, v in p.items():
        f = num(v)
        out.append(f"{k}={f:.3g}" if f is not None else f"{k}={v}")
    return ", ".join(out) if out else DASH


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
