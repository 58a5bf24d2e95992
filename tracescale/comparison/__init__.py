"""Before/after comparison of two analyze documents and its CI regression gate."""

from __future__ import annotations

from tracescale.comparison.core import (
    bootstrap_change_pct,
    compare_docs,
    compare_runs,
    gate,
    gate_exit_code,
)

__all__ = ["bootstrap_change_pct", "compare_docs", "compare_runs", "gate", "gate_exit_code"]
