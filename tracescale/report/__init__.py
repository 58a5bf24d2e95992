"""Renderers of the study and compare documents (plain dicts following the JSON contract).

Renderers only format what the document holds, so a saved study re-renders without traces.
"""

from __future__ import annotations

from tracescale.report.render import FORMATS, guess_format, render, render_compare

__all__ = ["FORMATS", "guess_format", "render", "render_compare"]
