"""Design matrix and observations -> non-negative least-squares coefficients, without scipy.

Why not ``scipy.optimize.nnls``: importing scipy.optimize costs about half a second, a fifth of
a cold ``analyze`` of a small study, and every fit here has at most four columns (the scaling
laws' terms, alpha and 1/bandwidth). For so few columns the exact optimum is found by trying
every set of free columns: the problem is convex, its solution is the unconstrained least
squares of one such set with no negative coefficient, and the best of those is it. Wider
problems (none today) go to scipy.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

#: Up to this many columns the subsets are enumerated (2**4 = 16 small solves).
MAX_EXACT_COLUMNS = 4
#: Per column count, every non-empty set of columns, fewest columns first.
_COLUMN_SETS = {
    k: [
        [j for j in range(k) if mask >> j & 1]
        for mask in sorted(range(1, 1 << k), key=lambda m: (bin(m).count("1"), m))
    ]
    for k in range(MAX_EXACT_COLUMNS + 1)
}


#: Most answers :func:`nnls` remembers (then it forgets them all): an analysis fits the same
#: few-row problems over and over (a law's fit, its cross-validation folds and runner-up forms
#: share their rows; a third of a small study's 1,400 calls repeat one), and each is 16 tiny
#: solves whose numpy overhead, not arithmetic, is the cost.
MEMO_SIZE = 4096
#: Larger problems are solved afresh (their bytes would make the memo's memory grow).
MEMO_MAX_ELEMENTS = 256
_memo: dict[tuple[tuple[int, ...], bytes, bytes], tuple[F64, float]] = {}


def nnls(x: F64, y: F64) -> tuple[F64, float]:
    """``argmin ||x c - y||`` over ``c >= 0``, and the residual norm (as scipy's ``nnls``).

    Among sets with the same residual (to 1e-12 relative) the one with fewer columns wins, so
    collinear columns give the sparser, deterministic answer.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.size > MEMO_MAX_ELEMENTS:
        return _solve(x, y)
    key = (x.shape + y.shape, x.tobytes(), y.tobytes())  # exact: the same bytes, same answer
    got = _memo.get(key)
    if got is None:
        if len(_memo) >= MEMO_SIZE:
            _memo.clear()
        got = _memo[key] = _solve(x, y)
    return got[0].copy(), got[1]


def _solve(x: F64, y: F64) -> tuple[F64, float]:
    """:func:`nnls` proper."""
    k = x.shape[1]
    if k > MAX_EXACT_COLUMNS:
        from scipy.optimize import nnls as scipy_nnls

        coef, res = scipy_nnls(x, y)
        return np.asarray(coef, dtype=np.float64), float(res)
    best = np.zeros(k)
    best_res = float(np.linalg.norm(y))
    for cols in _COLUMN_SETS[k]:
        sol = np.linalg.lstsq(x[:, cols], y, rcond=None)[0]
        if (sol < 0).any():
            continue
        coef = np.zeros(k)
        coef[cols] = sol
        res = float(np.linalg.norm(x @ coef - y))
        if res < best_res * (1.0 - 1e-12):
            best, best_res = coef, res
    return best, best_res
