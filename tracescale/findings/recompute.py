"""Activation recomputation as a finding: a study's largest run in, one context finding out.

Why a finding and not a lever: recomputed forward work is compute and scales like it, so no
law flags it and no category holds it; but it is time the job chose to spend for memory, and
the lever people pull (checkpoint fewer layers, recompute only the cheap-to-store parts) is
known. Its gain is not promised: what memory allows is not in a trace.
"""

from __future__ import annotations

from typing import Any

from tracescale.findings.common import Finding, mean_step
from tracescale.report.fmt import num, secs

#: Recomputation below this share of the step is not worth a finding.
MIN_SHARE = 0.05


def recompute_finding(runs: list[dict[str, Any]]) -> list[tuple[float, Finding]]:
    """The largest run's recomputed forward work (``recompute_s``: every ``recompute: `` top
    op, those past the kept names too), where it is 5% of the step or more."""
    last = runs[-1]
    step = mean_step(last)
    seconds = num(last.get("recompute_s")) or 0.0
    share = seconds / step if step > 0 else 0.0
    if share < MIN_SHARE:
        return []
    text = (
        f"Activation recomputation: {secs(seconds)} per step ({share:.0%} of the step) runs "
        "forward work again in backward (activation checkpointing). Where memory allows, "
        "checkpoint fewer layers or recompute selectively (only the activations that are "
        "cheap to recompute and costly to store, such as attention)."
    )
    finding = Finding(text=text, category="compute", value=share, kind="context")
    return [(1.0 + 0.1 * share, finding)]
