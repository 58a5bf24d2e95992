"""Per-node scaling laws: how one group of nodes (a kernel name, a host op's gaps) changes with N.

Each group's time per step, measured at several world sizes, is fitted by non-negative least
squares to ``a`` (does not shrink: per-kernel floors, replicated work), ``b/N`` (sharded work)
and ``a + b/N``; the form is chosen by leave-one-out error on relative residuals, and the
runner-up is kept for the model-form spread of the intervals.

Fewer parameters win only ties, and a tie is judged by the folds' own scatter (the
one-standard-error rule), not by a fixed margin: a per-kernel floor that is 2% of a group's
time at the largest measured N leaves ``b/N`` only ~2% worse in leave-one-out error, yet at 8x
that N the floor is a third of the kernel's time. A fixed 2% margin read such a floor as b/N
and projected launch-bound steps 10% short at 4x.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tracescale.scaling.nnls import nnls

F64 = npt.NDArray[np.float64]

LAW_FORMS: tuple[str, ...] = ("a", "b/N", "a+b/N")
#: With two sizes (in-sample errors, no folds): a form must beat a simpler one by this relative
#: margin to be chosen.
_MARGIN = 0.02
#: Leave-one-out errors closer than this (relative) are a tie whatever the folds' scatter: below
#: what one step's timing resolves.
_TIE = 1e-3


def _design(form: str, n: F64) -> F64:
    cols = {"a": [np.ones_like(n)], "b/N": [1.0 / n], "a+b/N": [np.ones_like(n), 1.0 / n]}
    return np.column_stack(cols[form])


def _coef(form: str, n: F64, y: F64) -> F64:
    w = 1.0 / np.maximum(np.abs(y), 1e-12)  # relative residuals: small N must not dominate
    x = _design(form, n) * w[:, None]
    coef, _ = nnls(x, y * w)
    return np.asarray(coef, dtype=np.float64)


def _value(form: str, coef: F64, n: F64) -> F64:
    return np.asarray(_design(form, n) @ coef, dtype=np.float64)


def _scalar(form: str, coef: Sequence[float], n: float) -> float:
    """``_value`` at one N, in plain arithmetic (a projection asks thousands of times)."""
    if form == "a":
        return float(coef[0])
    if form == "b/N":
        return float(coef[0]) / n
    return float(coef[0]) + float(coef[1]) / n


@dataclass(frozen=True)
class Law:
    """A fitted law and its runner-up; ``ratio`` scales a duration measured at ``ref_n``."""

    form: str
    coef: tuple[float, ...]
    alt_form: str
    alt_coef: tuple[float, ...]
    cv_error: float

    def value(self, n: float, alt: bool = False) -> float:
        form, coef = (self.alt_form, self.alt_coef) if alt else (self.form, self.coef)
        return _scalar(form, coef, float(n))

    def ratio(self, n: float, ref_n: float, alt: bool = False) -> float:
        ref = self.value(ref_n, alt)
        return self.value(n, alt) / ref if ref > 0 else 1.0


CONSTANT = Law("a", (1.0,), "a", (1.0,), 0.0)


def parallel_law(law: Law) -> Law | None:
    """``law`` with its constant part parallel: ``a + b/N`` -> ``(a + b)/N`` (None: nothing
    to move, the law is already ``b/N``)."""

    def moved(form: str, coef: tuple[float, ...]) -> tuple[float, ...]:
        if form == "a":
            return (coef[0],)
        if form == "a+b/N":
            return (coef[0] + coef[1],)
        return coef

    if law.form == "b/N" or law.value(1.0) <= 0:
        return None
    return Law("b/N", moved(law.form, law.coef), "b/N", moved(law.alt_form, law.alt_coef), 0.0)


def fit_law(sizes: Sequence[float], values: Sequence[float]) -> Law:
    """The law of one group from its time per step at each measured N (>= 1 point)."""
    n = np.asarray(sizes, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(y) & (y >= 0)
    n, y = n[keep], y[keep]
    if len(n) == 0 or float(y.max()) <= 0:
        return CONSTANT
    if len(np.unique(n)) == 1:
        return Law("a", (float(y.mean()),), "a", (float(y.mean()),), 0.0)
    errs: dict[str, float] = {}
    margin = _MARGIN
    folds: dict[str, F64] = {}
    for form in LAW_FORMS:
        if len(n) >= 3:
            e = []
            for i in range(len(n)):
                m = np.arange(len(n)) != i
                c = _coef(form, n[m], y[m])
                e.append(abs(_value(form, c, n[i : i + 1])[0] - y[i]) / max(y[i], 1e-12))
            folds[form] = np.asarray(e, dtype=np.float64)
            errs[form] = float(np.mean(e))
        else:
            c = _coef(form, n, y)
            err = np.abs(_value(form, c, n) - y) / np.maximum(y, 1e-12)
            errs[form] = float(np.mean(err)) + (0.01 if form == "a+b/N" else 0.0)
    ranked = sorted(LAW_FORMS, key=lambda f: (errs[f], LAW_FORMS.index(f)))
    best = ranked[0]
    if folds:  # one standard error of the best form's mean fold error
        e_best = folds[best]
        margin = max(float(np.std(e_best, ddof=1)) / np.sqrt(len(e_best)), _TIE)
    for f in LAW_FORMS:  # prefer the simplest form within the margin of the best
        if errs[f] <= errs[best] + margin:
            best = f
            break
    alt = next(f for f in ranked if f != best)
    return Law(
        best,
        tuple(float(x) for x in _coef(best, n, y)),
        alt,
        tuple(float(x) for x in _coef(alt, n, y)),
        errs[best],
    )


def fit_form(form: str, sizes: Sequence[float], values: Sequence[float]) -> tuple[float, ...]:
    """Coefficients of one given form (``LAW_FORMS``) fitted to the points, as ``fit_law``
    fits each candidate (relative residuals, non-negative)."""
    n = np.asarray(sizes, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    return tuple(float(x) for x in _coef(form, n, y))
