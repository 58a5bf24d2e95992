"""Sequential loops (the replay's passes, the compensated group sums) -> their numba-compiled
versions, loaded only where they pay off.

Why lazily and by size: importing numba and loading its cached machine code costs about half a
second, more than the plain Python loops take on the graphs of small studies (every shipped
one, and a single replay of most real traces). A projection replays one graph dozens of times,
and a large trace's graph has millions of elements: there the compiled loop wins by far. The
plain loop is the same function, so both paths give identical numbers (tested).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

#: Elements (nodes, pieces) a loop has been called on, summed over the process, from which it
#: runs compiled; below it the plain Python loop runs and numba is not imported. Measured on an
#: 81k-node graph: the plain replay pass 0.04 s, numba's import and cached-code load 0.45 s, the
#: compiled pass 0.002 s; so compiling pays from about a million node passes.
MIN_ELEMENTS = 1_000_000
#: The same threshold once numba is imported and its machine code loaded in this process (the
#: trace scanner does so for large files, another compiled loop may have): loading one more
#: cached loop then costs about 10 ms, as much as the plain replay pass on some 10k nodes, and
#: the plain passes before the first threshold were most of a 16-rank projection's replay
#: stage (12 passes of a 100k-node graph: 1.3 s, against 0.2 s for its 117 compiled passes).
LOADED_MIN_ELEMENTS = 20_000


class Compiled:
    """``fn`` compiled once the elements it was called on add up to ``MIN_ELEMENTS``."""

    def __init__(
        self, fn: Callable[..., None], weight: float = 1.0, imports_numba: bool = True
    ) -> None:
        """``weight``: how much a call's element costs in the plain loop, against a node of the
        replay pass (a lighter loop needs more elements before compiling pays);
        ``imports_numba``: False for a loop whose plain version is fast enough that it is
        compiled only where numba is already loaded, never importing it itself."""
        self.fn = fn
        self.weight = weight
        self.imports_numba = imports_numba
        self._done = False
        self._jit: Callable[..., None] | None = None
        self._seen = 0.0

    def available(self) -> bool:
        """Whether numba can compile here (imports it)."""
        return self._load() is not None

    def get(self, size: int) -> Callable[..., Any] | None:
        """The compiled loop for a call on ``size`` elements, or None for the plain one."""
        self._seen += size * self.weight
        if self._seen >= MIN_ELEMENTS and self.imports_numba:
            return self._load()
        if self._seen >= LOADED_MIN_ELEMENTS and numba_loaded():
            return self._load()
        return None

    def _load(self) -> Callable[..., None] | None:
        if not self._done:
            self._done = True
            try:  # numba is a dependency, but the loop stays plain Python where it cannot load
                from numba import njit
            except ImportError:  # pragma: no cover - exercised where numba is not installed
                return None
            self._jit = njit(cache=True, nogil=True)(self.fn)
            _HANDED_OUT[0] = True
        return self._jit


#: Whether a loop of this process was compiled (numba imported, its registries loading).
_HANDED_OUT = [False]


def numba_loaded() -> bool:
    """Whether this process already paid numba's import and registry load: the trace scanner
    is loaded, or a loop here was compiled."""
    fast = sys.modules.get("tracescale.ingest.fast")
    return bool(fast is not None and fast.loaded()) or _HANDED_OUT[0]
