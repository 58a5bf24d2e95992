"""tracescale: where each training step's time goes, and how far the job scales.

Public API (the CLI is a thin layer over exactly these)::

    study = tracescale.analyze("traces/")      # -> Study
    study.breakdown()                          # tidy DataFrame, seconds
    study.save("study.json"); tracescale.load("study.json")
    tracescale.compare("before/", "after/")    # -> Comparison
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from tracescale.api import Comparison, analyze, compare, load
    from tracescale.study import Study

__all__ = ["Comparison", "Study", "__version__", "analyze", "compare", "from_hta", "load"]


def __getattr__(name: str) -> Any:
    """Import the heavy parts lazily so `import tracescale` and the CLI start fast."""
    if name in ("analyze", "compare", "load", "Comparison"):
        from tracescale import api

        return getattr(api, name)
    if name == "Study":
        from tracescale.study import Study

        return Study
    if name == "from_hta":
        from tracescale.hta_interop import from_hta

        return from_hta
    raise AttributeError(f"module 'tracescale' has no attribute {name!r}")
