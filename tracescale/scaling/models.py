"""Candidate forms t(N) for one series, non-negative fits, and the choice among them.

Every form is a sum of non-negative coefficients times basis functions that are themselves
non-negative for N >= 1 (1, 1/N, log2 N, N), so no fitted form can ever project a negative
time: the failure of Extra-P's default modeler (a falling line through 100/N) is impossible
by construction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tracescale.scaling.nnls import nnls

FloatArray = npt.NDArray[np.float64]

#: Basis functions by parameter name: ``a`` serial, ``b`` parallel, ``c`` overhead growth.
_TERMS: dict[str, str] = {"a": "1", "b": "1/N", "clog": "log2(N)", "clin": "N"}

#: Form name -> parameter names, in the order they enter the design matrix.
FORMS: dict[str, tuple[str, ...]] = {
    "a": ("a",),
    "b/N": ("b",),
    "a+b/N": ("a", "b"),
    "a+c*log2(N)": ("a", "clog"),
    "a+c*N": ("a", "clin"),
    "a+b/N+c*log2(N)": ("a", "b", "clog"),
    "a+b/N+c*N": ("a", "b", "clin"),
    # Straggler forms, used only when cause attribution found waits for a late rank: with one
    # rank there is nobody to wait for, so the penalty term is zero at N=1.
    # ``@K`` after the name: the straggler term starts at N=K (the smallest measured N whose
    # ranks waited for one), e.g. ``a+b/N+s/N@4``.
    "a+b/N+s/N": ("a", "b", "s"),
    "a+s": ("a", "s1"),
}


def terms(form: str) -> tuple[str, ...]:
    """Parameter names of ``form`` (a straggler onset suffix ``@K`` is ignored)."""
    return FORMS[form.split("@", 1)[0]]


def _onset(form: str) -> float:
    return float(form.split("@", 1)[1]) if "@" in form else 2.0


#: Preference order (fewest parameters first, then the shape the mode expects): ties in
#: cross-validation error go to the earlier form.
PREFERENCE: dict[str, tuple[str, ...]] = {
    "strong": (
        "a",
        "b/N",
        "a+b/N",
        "a+c*log2(N)",
        "a+c*N",
        "a+b/N+c*log2(N)",
        "a+b/N+c*N",
    ),
    "weak": (
        "a",
        "b/N",
        "a+c*log2(N)",
        "a+c*N",
        "a+b/N",
        "a+b/N+c*log2(N)",
        "a+b/N+c*N",
    ),
}

#: A form whose (weighted) error is within this share of the step time counts as exact.
ABS_TOL = 0.002
#: ... or within this factor of the best candidate's error.
REL_TOL = 1.25


#: Design matrices already built, by (form, world sizes): the bootstrap refits the same forms
#: at the same world sizes hundreds of times. Bounded; the arrays are read-only.
_DESIGNS: dict[tuple[str, tuple[int, ...], bytes], FloatArray] = {}
_DESIGNS_MAX = 512


def design(form: str, n: FloatArray) -> FloatArray:
    """Design matrix of ``form`` at world sizes ``n`` (columns in FORMS order; read-only)."""
    n = np.asarray(n, dtype=np.float64)
    key = (form, n.shape, n.tobytes())
    hit = _DESIGNS.get(key)
    if hit is not None:
        return hit
    x = _build_design(form, n)
    x.setflags(write=False)
    if len(_DESIGNS) >= _DESIGNS_MAX:
        _DESIGNS.clear()
    _DESIGNS[key] = x
    return x


def _build_design(form: str, n: FloatArray) -> FloatArray:
    cols = []
    for p in terms(form):
        if p == "a":
            cols.append(np.ones_like(n))
        elif p == "b":
            cols.append(1.0 / n)
        elif p == "clog":
            cols.append(np.log2(n))
        elif p == "s":
            cols.append((n >= _onset(form)) / n)
        elif p == "s1":
            cols.append((n >= _onset(form)).astype(np.float64))
        else:
            cols.append(n.astype(np.float64))
    return np.column_stack(cols).astype(np.float64)


def fit_coef(form: str, n: FloatArray, y: FloatArray, w: FloatArray) -> FloatArray:
    """Weighted non-negative least squares of ``form``; all coefficients >= 0."""
    x = design(form, n) * w[:, None]
    coef, _ = nnls(x, y * w)
    return np.asarray(coef, dtype=np.float64)


def evaluate(form: str, coef: Sequence[float], n: FloatArray) -> FloatArray:
    """t(N) for the given coefficients; never negative because coef >= 0 and bases >= 0."""
    out = design(form, np.asarray(n, dtype=np.float64)) @ np.asarray(coef, dtype=np.float64)
    return np.maximum(out, 0.0)


@dataclass(frozen=True)
class SeriesFit:
    """One series' chosen model: form, coefficients and how well it fits."""

    form: str
    coef: tuple[float, ...]
    rmse_s: float
    cv_error: float | None = None  # leave-one-out error, share of step time (weighted)
    candidates: Mapping[str, float] = field(default_factory=dict)
    n_points: int = 0
    assumed: bool = False

    def predict(self, n: FloatArray) -> FloatArray:
        return evaluate(self.form, self.coef, n)

    @property
    def params(self) -> dict[str, float]:
        """Named coefficients: ``a`` (serial), ``b`` (parallel), ``c`` (growth)."""
        out = {"a": 0.0, "b": 0.0, "c": 0.0}
        for name, v in zip(terms(self.form), self.coef, strict=True):
            key = "c" if name.startswith("c") else "s" if name.startswith("s") else name
            out[key] = float(v)
        return out

    def serial(self) -> float:
        return self.params["a"]

    def growth(self, n: FloatArray) -> FloatArray:
        """The overhead part o(N) of the form (the log2 N or N term)."""
        p = dict(zip(terms(self.form), self.coef, strict=True))
        return float(p.get("clog", 0.0)) * np.log2(n) + float(p.get("clin", 0.0)) * n


def _loo_error(form: str, n: FloatArray, y: FloatArray, w: FloatArray) -> float:
    err = []
    for i in range(len(n)):
        keep = np.arange(len(n)) != i
        coef = fit_coef(form, n[keep], y[keep], w[keep])
        pred = evaluate(form, tuple(coef), n[i : i + 1])[0]
        err.append((pred - y[i]) * w[i])
    return float(np.sqrt(np.mean(np.square(err))))


def _rmse(form: str, coef: FloatArray, n: FloatArray, y: FloatArray) -> float:
    return float(np.sqrt(np.mean(np.square(evaluate(form, tuple(coef), n) - y))))


def fit_series(
    n: FloatArray,
    y: FloatArray,
    w: FloatArray,
    *,
    mode: str,
    form: str | None = None,
    assumed: bool = False,
) -> SeriesFit:
    """Fit one series (one value per world size).

    With ``form`` given (bootstrap refits, single-run assumptions) only that form is fitted.
    Otherwise: with >= 3 world sizes pick by leave-one-out cross-validation among forms with
    fewer parameters than points; with fewer, the fewest parameters that fit exactly. In both
    cases near-ties go to the earlier form of ``PREFERENCE[mode]`` (parsimony), so exact data
    from ``a + b/N`` is never explained by a three-parameter form.
    """
    n = np.asarray(n, dtype=np.float64)
    y = np.maximum(np.asarray(y, dtype=np.float64), 0.0)
    w = np.asarray(w, dtype=np.float64)
    if form is not None:
        coef = fit_coef(form, n, y, w)
        return SeriesFit(
            form, tuple(map(float, coef)), _rmse(form, coef, n, y), None, {}, len(n), assumed
        )
    order = PREFERENCE[mode]
    k = len(n)
    scores: dict[str, float] = {}
    if k >= 3:
        for f in order:
            if len(FORMS[f]) <= k - 1:
                scores[f] = _loo_error(f, n, y, w)
    else:
        for f in order:
            if len(FORMS[f]) <= k:
                c = fit_coef(f, n, y, w)
                pred = evaluate(f, tuple(c), n)
                scores[f] = float(np.sqrt(np.mean(np.square((pred - y) * w))))
    best = min(scores.values())
    limit = max(best * REL_TOL, best + ABS_TOL) if k >= 3 else best + ABS_TOL
    chosen = next(f for f in order if f in scores and scores[f] <= limit)
    coef = fit_coef(chosen, n, y, w)
    return SeriesFit(
        chosen,
        tuple(map(float, coef)),
        _rmse(chosen, coef, n, y),
        scores[chosen] if k >= 3 else None,
        dict(scores),
        k,
        assumed,
    )
