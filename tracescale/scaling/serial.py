"""Serial fraction, Amdahl ceiling, Karp–Flatt and Gustafson.

Strong mode: ``f = sum_c a_c / T(1)`` over all categories but communication, whose time is
an overhead ``o(N)`` reported separately (at N=1 there is no communication to serialize).

Weak mode: per-rank times do not separate serial from parallel work by how they scale (both
stay flat), so the serial share is category-based: ``sync``, ``reduction``, ``host`` and
``idle`` count as serial, plus ``serial_compute`` (compute in replicated regions such as
Optimizer.step); the rest is parallel. ``assumptions`` can move a category either way.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tracescale.categories import CATEGORIES
from tracescale.scaling.fit import WEAK_SERIAL, StudyModel


def karp_flatt(speedup_over_one: float, n: int) -> float | None:
    """``e = (1/S - 1/N) / (1 - 1/N)``; None where undefined (N <= 1 or S <= 0)."""
    if n <= 1 or not speedup_over_one > 0:
        return None
    return (1.0 / speedup_over_one - 1.0 / n) / (1.0 - 1.0 / n)


def as_serial_fraction(e: float | None) -> float | None:
    """``e`` where it reads as a serial fraction (inside [0, 1], rounding noise forgiven)."""
    if e is None or not -1e-9 <= e <= 1.0 + 1e-9:
        return None
    return min(max(e, 0.0), 1.0)


def karp_flatt_by_category(
    t_n: Mapping[str, float], t_1: Mapping[str, float], n: int, mode: str
) -> dict[str, float] | None:
    """Each category's contribution to e(N); the contributions sum to e(N) exactly.

    With ``T(1) = sum_c t_c(1)`` and ``1/S'(N) = T(N) / (k T(1))`` (k = 1 strong, N weak):
    ``e_c(N) = (t_c(N)/k - t_c(1)/N) / (T(1) (1 - 1/N))``. A perfectly parallel category
    contributes 0, a serial one a constant, a growing overhead a rising value.
    """
    t1 = sum(t_1.values())
    if n <= 1 or t1 <= 0:
        return None
    k = float(n) if mode == "weak" else 1.0
    d = t1 * (1.0 - 1.0 / n)
    return {c: (t_n[c] / k - t_1[c] / n) / d for c in CATEGORIES}


def gustafson(n: float, s: float) -> float:
    """Gustafson's scaled speedup ``N - s (N - 1)``."""
    return n - s * (n - 1.0)


def serial_set(assumptions: Mapping[str, str]) -> set[str]:
    """Categories counted serial in weak mode after the user's overrides."""
    out = set(WEAK_SERIAL)
    for c, kind in assumptions.items():
        if kind == "serial":
            out.add(c)
        elif kind == "parallel":
            out.discard(c)
    return out


def weak_share(
    cats: Mapping[str, float], serial_compute: float, assumptions: Mapping[str, str]
) -> tuple[float, dict[str, float]]:
    """Serial share ``s`` of one step (weak mode) and each category's part of it."""
    total = sum(cats.values())
    ser = serial_set(assumptions)
    parts = {c: cats[c] for c in CATEGORIES if c in ser}
    if "compute" not in ser:
        parts["compute"] = min(serial_compute, cats["compute"])
    if total <= 0:
        return 0.0, {c: 0.0 for c in parts}
    by = {c: v / total for c, v in parts.items()}
    return float(sum(by.values())), by


def strong_fraction(model: StudyModel, t1: float) -> tuple[float, dict[str, float]]:
    """``f`` and ``f_c = a_c / T(1)`` (communication excluded: it is overhead), in [0, 1].

    The fitted constants can exceed the (estimated) one-GPU step when a job slows down with
    more ranks: the constants then absorb overheads that grow. A fraction is never above one,
    so the parts are scaled down to sum to one; the report says why instead of printing 103%.
    """
    if t1 <= 0:
        return 0.0, {c: 0.0 for c in model.cats}
    by = {c: max(fit.serial(), 0.0) / t1 for c, fit in model.cats.items()}
    total = float(sum(by.values()))
    if total > 1.0:
        by = {c: v / total for c, v in by.items()}
        total = 1.0
    return total, by


def model_t1(model: StudyModel) -> dict[str, float]:
    """Modelled per-category time at N=1."""
    return {c: float(v[0]) for c, v in model.predict(np.array([1.0])).items()}
