"""Sequential replay loops -> their numba-compiled versions, loaded only where they pay off.

Why lazily and by size: importing numba and loading its cached machine code costs about half a
second, more than the plain Python loops take on a graph of a few tens of thousands of nodes
(every shipped and most real single-step traces). Large graphs, replayed dozens of times per
projection, gain far more than that. The plain loop is the same function, so both paths give
identical numbers (tested).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: A graph of this many elements (nodes, pieces) is compiled for at once ...
MIN_SIZE = 50_000
#: ... and so is any once the elements replayed so far add up to this (a projection replays
#: one graph dozens of times); below both the plain Python loop runs and numba is not imported.
MIN_TOTAL = 1_000_000


class Compiled:
    """``fn`` compiled on first use by a large graph, or once enough elements were replayed."""

    def __init__(self, fn: Callable[..., None]) -> None:
        self.fn = fn
        self._done = False
        self._jit: Callable[..., None] | None = None
        self._seen = 0

    def available(self) -> bool:
        """Whether numba can compile here (imports it)."""
        return self._load() is not None

    def get(self, size: int) -> Callable[..., Any] | None:
        """The compiled loop for a graph of ``size`` elements, or None for the plain one."""
        self._seen += size
        return self._load() if size >= MIN_SIZE or self._seen >= MIN_TOTAL else None

    def _load(self) -> Callable[..., None] | None:
        if not self._done:
            self._done = True
            try:  # numba is a dependency, but the loop stays plain Python where it cannot load
                from numba import njit
            except ImportError:  # pragma: no cover - exercised where numba is not installed
                return None
            self._jit = njit(cache=True, nogil=True)(self.fn)
        return self._jit
