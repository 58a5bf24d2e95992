"""How tracescale's categories read in Holistic Trace Analysis (HTA) terms: names only, no logic.

The table (also in the package docstring) maps each category to HTA's temporal-breakdown stem,
idle category and kernel type. It describes the *category* view; the HTA-compatible shares in
the study JSON (``gpu_idle_pct``, ``comm_comp_overlap_pct``, ``gpu_time_s``) are measured from
the GPU events directly, as HTA does (classify/gpu_metrics.py).
"""

from __future__ import annotations

from typing import Final

from tracescale.categories import CATEGORIES

#: tracescale category -> HTA temporal-breakdown column stem (``get_temporal_breakdown``).
HTA_TEMPORAL: Final[dict[str, str]] = {
    "compute": "compute_time",
    "memcpy": "non_compute_time",
    "communication": "non_compute_time",
    "dataloader": "idle_time",
    "sync": "idle_time",
    "reduction": "idle_time",
    "host": "idle_time",
    "idle": "idle_time",
}

#: tracescale category -> HTA ``idle_category`` (``get_idle_time_breakdown``); GPU-busy ones: None.
HTA_IDLE_CATEGORIES: Final[dict[str, str | None]] = {
    "compute": None,
    "memcpy": None,
    "communication": None,
    "dataloader": "host_wait",
    "sync": "host_wait",
    "reduction": "host_wait",
    "host": "host_wait",
    "idle": "other",
}

#: tracescale category -> HTA ``kernel_type`` (``get_gpu_kernel_breakdown``); GPU-idle ones: None.
HTA_KERNEL_TYPES: Final[dict[str, str | None]] = {
    "compute": "COMPUTATION",
    "memcpy": "MEMORY",
    "communication": "COMMUNICATION",
    "dataloader": None,
    "sync": None,
    "reduction": None,
    "host": None,
    "idle": None,
}

#: The whole mapping, one row per tracescale category (the table in the module docstring).
HTA_CATEGORY_MAP: Final[dict[str, dict[str, str | None]]] = {
    c: {
        "temporal": HTA_TEMPORAL[c],
        "idle_category": HTA_IDLE_CATEGORIES[c],
        "kernel_type": HTA_KERNEL_TYPES[c],
    }
    for c in CATEGORIES
}
