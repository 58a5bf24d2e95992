"""Degrees of freedom -> Student's t 95th percentile, without importing scipy.

An analyze that hits no scipy path starts in a fraction of the time (scipy.stats alone costs
about as much as the rest of the imports), so the one quantile the fits need is held here:
a table for small samples, where the expansion is poor, and the Cornish-Fisher expansion of
the t quantile around the normal one beyond it (Abramowitz & Stegun 26.7.5; its error at 31
degrees of freedom is below 1e-5). tests/test_quantiles.py holds both equal to scipy's.
"""

from __future__ import annotations

#: t(0.95, dof) for dof = 1..30 (scipy.stats.t.ppf, rounded to 4 decimals).
_T95 = (
    6.3138, 2.9200, 2.3534, 2.1318, 2.0150, 1.9432, 1.8946, 1.8595, 1.8331, 1.8125,
    1.7959, 1.7823, 1.7709, 1.7613, 1.7531, 1.7459, 1.7396, 1.7341, 1.7291, 1.7247,
    1.7207, 1.7171, 1.7139, 1.7109, 1.7081, 1.7056, 1.7033, 1.7011, 1.6991, 1.6973,
)  # fmt: skip
#: The standard normal's 95th percentile.
Z95 = 1.6448536269514722


def student_t95(dof: int) -> float:
    """The 95th percentile of Student's t with ``dof`` >= 1 degrees of freedom."""
    if dof < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {dof}")
    if dof <= len(_T95):
        return _T95[dof - 1]
    z, v = Z95, float(dof)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / v + g2 / v**2 + g3 / v**3 + g4 / v**4
