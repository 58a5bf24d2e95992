"""Interleaved 1F1B (virtual pipeline stages): how many model chunks a stage runs, read from its
send/recv counts, and what that changes in the bubble.

Why it matters: with ``v`` chunks per rank (Megatron's virtual pipeline stages) a microbatch
crosses the ring of ``p`` stages ``v`` times, each pass a ``1/v`` share of the stage's layers.
The fill and drain shrink to ``(p - 1)`` chunk passes, ``(p - 1) (t_f + t_b) / v``, but a
microbatch crosses ``v p - 1`` links, so the fill and drain carry ``2 (v p - 1)`` hops; and with
fewer microbatches per replica than stages (a fixed global batch at a large N) the ring's round
trip is not covered: the first stage idles ``p - m`` chunk passes at each of the ``v - 1``
crossings, forward and backward, and at one microbatch the step is plain 1F1B's again. Read
as 1F1B, the stage's chunk passes were ``m`` microbatches and the fill/drain ``v`` times too long,
and the projections past ``m = p`` too fast.

How ``v`` is read (one rank's trace, no schedule assumed): per pair of neighbouring stages, the
send/recv nodes per step. A stage in the middle of the ring sends and receives every chunk pass
of every microbatch to both neighbours (equal counts); at the ends, interleaving closes the
ring (the last stage feeds the first's next chunk), and that pair carries ``v - 1`` of every
``v`` chunk crossings: ``v = big / (big - small)``. Without interleaving an end stage has one
neighbour (``v = 1``). A middle stage alone cannot tell (None); nor can a ring of two stages,
whose closing pair is its only pair (read as ``v = 1``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracescale.replay.laws.nodes import Law

#: A reading of ``v`` further than this from a whole number is no reading (partial windows).
_WHOLE = 0.05


def peer_counts(coll: Any, rows: np.ndarray, steps: int) -> dict[str, float]:
    """Send/recv nodes per step per pair group (``pg``) of one rank's collective table (``rows``:
    its p2p rows; ``steps``: the steps they span)."""
    if not rows.any() or "pg" not in coll or steps <= 0:
        return {}
    pgs = coll["pg"].astype(str).to_numpy()[rows]
    keys, counts = np.unique(pgs, return_counts=True)
    return {str(k): float(c) / steps for k, c in zip(keys, counts, strict=True)}


def chunk_reading(counts: Mapping[str, float]) -> int | None:
    """Model chunks per rank from its send/recv nodes per neighbour pair (module docstring);
    None where the counts cannot tell (a middle stage, more than two pairs, no whole ratio)."""
    vals = sorted((c for c in counts.values() if c > 0), reverse=True)
    if len(vals) == 1:
        return 1
    if len(vals) != 2 or vals[1] >= vals[0]:
        return None
    v = vals[0] / (vals[0] - vals[1])
    whole = round(v)
    return whole if whole >= 2 and abs(v - whole) <= _WHOLE * whole else None


def chunk_passes(counts: Mapping[str, float]) -> float:
    """Chunk passes (forward and backward) per step of the stage: the busiest neighbour pair
    carries a send and a recv of each (``m v``; plain 1F1B: ``m``)."""
    return max(counts.values(), default=0.0) / 2.0


def starved_chunks(stages: int, virtual: int, microbatches: float) -> float:
    """Chunk passes per step the stage idles beyond the fill and drain where a replica runs
    fewer microbatches than stages: ``(v - 1) (p - m)`` (0 from ``m = p`` on, and for 1F1B)."""
    m = max(microbatches, 1.0)
    return float((virtual - 1) * max(stages - m, 0.0))


@dataclass(frozen=True)
class StarvedLaw(Law):
    """The p2p law with the interleaved ring's starved passes added (``starved_chunks``) at
    ``m = passes_ref / v * ref_n / N`` microbatches per replica (a fixed global batch: the
    replicas grow with N, the stage count stays), each pass ``chunk_s`` seconds."""

    stages: int = 1
    virtual: int = 1
    microbatches_ref: float = 0.0
    ref_n: float = 1.0
    chunk_s: float = 0.0

    def value(self, n: float, alt: bool = False) -> float:
        m = self.microbatches_ref * self.ref_n / max(float(n), 1e-12)
        extra = starved_chunks(self.stages, self.virtual, m) * self.chunk_s
        return super().value(n, alt) + extra


def with_starved(
    law: Law, stages: int, virtual: int, passes: float, ref_n: float, chunk_s: float
) -> Law:
    """``law`` as a :class:`StarvedLaw` for an interleaved pipeline (``law`` unchanged for 1F1B,
    or where the stage's chunk passes cannot be read)."""
    if virtual < 2 or stages < 2 or passes <= 0 or chunk_s <= 0:
        return law
    return StarvedLaw(
        law.form, law.coef, law.alt_form, law.alt_coef, law.cv_error,
        stages, virtual, passes / virtual, ref_n, chunk_s,
    )  # fmt: skip
