"""JSON has no spelling for NaN or infinity: the one place a document becomes strictly valid JSON.

A leaf (standard library only) so every renderer that embeds or writes the document — the JSON
format, the HTML page's data island — can share it without importing the dispatcher in
:mod:`tracescale.report.render`, which imports the renderers.
"""

from __future__ import annotations

import math
from typing import Any


def finite(value: Any) -> Any:
    """NaN and infinities become null, recursively; keys become strings as JSON requires."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
