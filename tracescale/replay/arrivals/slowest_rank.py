"""The base run's arrival offsets at each collective -> how long the representative rank waits
for the slowest rank there at a projected N (a mixin of ``project.ReplayStudy``).

Why apart: the projection's durations (``project``) ask these per collective row, with their
own memos, while what they read (the arrival pools, the pooled host delays, the collective
table) is the base run's alone; here they sit with the rules that decide where a step's host
delay is waited for and, in a pipeline, how far it reaches. The warning for a projection that
rests mostly on that wait (:func:`straggler_warning`, read from the same delays) sits here too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tracescale.replay.arrivals.variability import OffsetPool, first_reached, lateness
from tracescale.replay.engine.run import RunReplay
from tracescale.replay.laws.p2p import p2p_rows
from tracescale.replay.uncertainty.delays import DelayModel

#: Share of a projected step spent waiting for the slowest rank past which the projection is
#: mostly a read of the delays' upper tail, and its error mostly that tail's sampling error.
STRAGGLER_SHARE = 0.25


class SlowestRankWaits:
    """Waits for the slowest rank by collective position (fields of ``ReplayStudy``)."""

    runs: tuple[RunReplay, ...]
    delays: DelayModel | None
    _cache: dict[tuple[int, int, int, float, float], tuple[float, float, float]]
    _memo: dict[tuple[Any, ...], Any]

    def _wait_terms(
        self, position: int, n: int, group: float, host_scale: float, dev_scale: float
    ) -> tuple[float, float, float]:
        """How long after the mean arrival the slowest rank arrives at one position, at ``n``
        ranks where the collective's group holds ``group``: (low end, point, high end).

        The step's own host delay is waited for once, at the first collective it reaches, for
        the slowest of that collective's group: a late rank holds its group there and, through
        the groups that overlap it, everyone by the step's end (``engine.late`` carries that
        lateness to the step's later collectives, grown to the slowest of the groups each has
        joined by then: :meth:`_join_lateness`).
        Later collectives see only the device jitter since the last sync of their own
        members: the slowest of the group
        (a tensor-parallel pair waits for its partner, not for the world).

        Point: the pooled host delays with their fitted tail (if one fits). Ends: the bootstrap
        resamples (tail refitted) at the 5th/95th percentile of the slowest rank, and the draws
        alone (no tail beyond them) as a further low end.
        """
        key = (position, n, round(group), round(host_scale, 9), round(dev_scale, 9))
        got = self._cache.get(key)
        if got is not None:
            return got
        pool = self._pools()[position]
        # A step's host delay is waited for once: at the first collective it reaches. The
        # representative rank then runs as late as the slowest rank, so later collectives
        # draw only the device jitter (their measured offsets still echo the same delay).
        key_first = first_key(host_scale, dev_scale)
        if key_first not in self._memo:
            self._memo[key_first] = first_reached(
                self._offsets(), self.delays, host_scale, dev_scale
            )
        first = self._memo[key_first]
        # Everything below reads only these and ``self.delays`` (held in the entry, so its id
        # is not reused while the entry lives): a scenario study sharing both gets the answer
        shared_key = (first, n, round(group), host_scale, dev_scale)
        shared = pool.terms.get(shared_key)
        if shared is not None and shared[0] is self.delays:
            out = self._cache[key] = shared[1]
            return out
        delays = self.delays if position == first else None
        if delays is None or hierarchical(pool, position):
            n = max(1, min(n, round(group)))
        point = lateness(pool, delays, n, host_scale, dev_scale)
        ends = [point]
        if delays is not None and delays.resampled:
            models = (*delays.ends(n), delays.with_tail(None))
            ends += [lateness(pool, m, n, host_scale, dev_scale) for m in models]
        out = (min(ends), point, max(ends))
        self._cache[key] = out
        pool.terms[shared_key] = (self.delays, out)
        return out

    def _join_lateness(
        self, n: int, sizes: Any, hs: float, dev_scale: float, end: int
    ) -> npt.NDArray[np.float64]:
        """Per collective row, how much later than the first-reached collective's slowest
        rank the slowest rank of the groups joined by then arrives (seconds, the wait terms'
        ``end``: 0 low, 1 point, 2 high; ``sizes``: each row's group size at ``n``).

        A late rank holds only its own group at the step's first collective (HSDP's in-node
        AllGather waits for the slowest of its node). A later collective of another group
        whose members met in different instances of that first one (``joined.joined_share``:
        the replicate AllReduce across nodes) waits for the slowest of all the groups it
        joins: the slowest of ``size x joined`` ranks, at most ``n``. Waiting for the slowest
        of all ``n`` at the first collective counted the other nodes' lateness there, and
        again in the replicate AllReduce's measured offsets (own N=16 of an HSDP study with
        lognormal delays: 50.7 ms against 43.6 ms). Each group joins once, however many of
        its collectives follow."""
        cols = self._coll_columns()
        out = np.zeros(len(sizes))
        first = self._memo.get(first_key(hs, dev_scale))
        pools = self._pools()
        if first is None or first not in pools or not hierarchical(pools[first], first):
            return out
        positions = cols["position"]
        at_first = np.flatnonzero(positions == first)
        if not len(at_first):
            return out
        k0 = max(1, min(n, round(float(sizes[at_first[0]]))))
        if k0 >= n:
            return out
        pgs = cols["pg"]
        pg0 = pgs[at_first[0]]
        joins = cols["joins"] if cols["joins"] is not None else np.ones(len(sizes))
        base = self._wait_terms(first, k0, k0, hs, dev_scale)[end]
        p2p = np.asarray(cols["p2p"], dtype=np.bool_)
        step = self.runs[-1].graph.step[cols["node"]]
        later = np.flatnonzero((positions > first) & ~p2p)
        later = later[np.lexsort((positions[later], step[later]))]
        # per step: under gradient accumulation a step without the replicate AllReduce holds
        # only in-node collectives past its first, at positions another step's AllReduce has
        apart = _steps_apart(step, pgs, later)
        for rows in np.split(later, np.flatnonzero(np.diff(step[later])) + 1):
            factors: dict[str, float] = {}
            drift = 1.0
            for i in rows.tolist():
                pg = pgs[i]
                if pg != pg0 and sizes[i] > 1:
                    f = max(1.0, joins[i] * float(sizes[i]))
                    factors[pg] = max(factors.get(pg, 1.0), f)
                    drift = max(drift, math.sqrt(apart[i]))
                level = min(n, round(k0 * math.prod(factors.values())))
                if level > k0:
                    late = self._wait_terms(first, level, level, hs, dev_scale)[end]
                    out[i] = max(late - base, 0.0) * drift
        return out

    def _offsets(self) -> dict[int, Any]:
        """The base run's arrival offsets without the p2p positions (no slowest-rank wait).

        In a pipeline each rank's whole host delay reaches the data-parallel collectives
        (``beta`` 1): a replica arrives as late as its slowest stage, whose delay travels
        down the send/recv chain, so a rank's arrival hardly follows its own delay (the
        measured ``beta`` reads near 0) while the slowest of all N ranks' delays holds the
        step. Read from the arrivals alone, no delay reached any collective and the slowest
        of 32 replicas' data loading was projected as device jitter shrinking with N (a
        pipeline with lognormal loader delays: 47.8 ms at 128 GPUs against 77.7 ms)."""
        got = self._memo.get(("offsets",))
        if got is None:
            c = self.runs[-1].coll
            # positions that only send/recv hold (a position's number is its order in the
            # step, so a step with one transfer fewer puts its AllReduce at a transfer's)
            skip = set()
            if len(c):
                pos = c["position"].to_numpy()
                skip = set(pos[p2p_rows(c)].tolist()) - set(pos[~p2p_rows(c)].tolist())
            got = {k: v for k, v in self._pools().items() if k not in skip}
            self._memo[("offsets",)] = got
        out: dict[int, Any] = got
        return out

    def _pools(self) -> dict[int, OffsetPool]:
        """The base run's arrival offsets by position, a pipeline's at ``beta`` 1
        (:meth:`_offsets`): read by its chains (``arrivals.chains``) they are already; where
        its chains cannot be read from the send/recv groups, each rank's whole delay reaches."""
        got = self._memo.get(("pools",))
        if got is None:
            c = self.runs[-1].coll
            pipeline = bool(len(c) and p2p_rows(c).any())
            got = {k: v.at_least(1.0) if pipeline else v for k, v in self.runs[-1].offsets.items()}
            self._memo[("pools",)] = got
        out: dict[int, OffsetPool] = got
        return out

    def _coll_columns(self) -> dict[str, Any]:
        """The base run's collective table as plain Python rows (read once per study: every
        projected N walks it, and frame access per row cost more than the replay)."""
        got = self._memo.get(("coll",))
        if got is None:
            c = self.runs[-1].coll
            pg = c["pg"].astype(str).tolist() if "pg" in c else [""] * len(c)
            fields = zip(
                c["collective"].astype(str).tolist(),
                c["algo"].astype(str).tolist(),
                c["bytes"].astype(float).tolist(),
                c["group"].astype(float).tolist(),
                pg,
                c["position"].astype(int).tolist(),
                c["transfer"].astype(float).tolist(),
                c["wait"].astype(float).tolist(),
                c["systematic"].astype(float).tolist(),
                c["rest"].astype(float).tolist(),
                c["host"].astype(float).tolist(),
                c["own_delay"].astype(float).tolist(),
                strict=True,
            )
            got = {
                "node": c["node"].to_numpy(),
                "p2p": p2p_rows(c).tolist(),
                "pg": pg,
                "rows": list(fields),
                "position": c["position"].to_numpy().astype(np.int64),
                "group": c["group"].to_numpy().astype(np.float64),
                "joins": c["joins"].to_numpy().astype(np.float64) if "joins" in c else None,
            }
            self._memo[("coll",)] = got
        out: dict[str, Any] = got
        return out


def _steps_apart(
    step: npt.NDArray[np.int64], pgs: list[str], rows: npt.NDArray[np.int64]
) -> npt.NDArray[np.float64]:
    """Per row, the steps since its process group's previous collective (its typical gap at
    its group's first), 1 where the group meets every step.

    Under gradient accumulation HSDP's replicate AllReduce meets once in ``k`` steps while the
    in-node AllGathers meet at every one: the nodes drift apart by the sum of ``k`` steps of
    their own slowest ranks' lateness, whose spread grows as ``sqrt(k)`` (the sums of
    independent steps; the slowest of 2-16 nodes' sums of 4 lognormal (sigma 1) steps is
    1.9-2.3 times one step's, simulated), so the wait for the slowest node grows by it."""
    out = np.ones(len(step))
    last: dict[str, int] = {}  # the step of each group's last meeting
    first: dict[str, int] = {}  # the row of each group's first meeting
    gaps: dict[str, list[int]] = {}
    for i in rows[np.argsort(step[rows], kind="stable")].tolist():
        pg, st = pgs[i], int(step[i])
        if pg not in last:
            first[pg] = i
        elif st > last[pg]:
            out[i] = st - last[pg]
            gaps.setdefault(pg, []).append(st - last[pg])
        last[pg] = st
    for pg, i in first.items():  # its first meeting: as far apart as it typically meets
        out[i] = float(np.median(gaps[pg])) if gaps.get(pg) else 1.0
    return out


def hierarchical(pool: OffsetPool, position: int) -> bool:
    """Whether the step's first collective waits for the slowest of its own group only, the
    later groups it joins for the rest (:meth:`SlowestRankWaits._join_lateness`): where it is
    the step's first collective (the one ``joined.joined_share`` counts instances of) and not a
    pipeline's (whose chains carry each stage's lateness: ``arrivals.chains``)."""
    return position == 0 and not len(pool.slack)


def first_key(host_scale: float, dev_scale: float) -> tuple[str, float, float]:
    """The memo key of the position where a step's host delay is waited for."""
    return ("first", round(host_scale, 9), round(dev_scale, 9))


def straggler_warning(
    projections: Sequence[dict[str, Any]], delays: DelayModel | None
) -> str | None:
    """A warning when, at the largest projected N, waiting for the slowest rank makes at least
    ``STRAGGLER_SHARE`` of the step. ``E[slowest of N]`` of a heavy-tailed delay is read from
    the few largest of the measured per-rank delays: from 150 Lomax draws (shape 0.45) the
    slowest of 16 is read within -28%/+60% (10th/90th percentile) by the fitted tail and no
    better by the unbiased order-statistic estimator, so the point may miss by more than the
    rest of the model does, and only more draws (steps x ranks) narrow it."""
    if delays is None:
        return None
    for p in sorted(projections, key=lambda q: -int(q["world_size"])):
        t = float(p["step_time_s"])
        wait = float(p.get("rank_to_rank_variability_s", 0.0))
        if t <= 0 or wait < STRAGGLER_SHARE * t:
            continue
        return (
            f"at N={int(p['world_size'])} waiting for the slowest rank is {wait * 1e3:.3g} ms "
            f"of the {t * 1e3:.3g} ms projected step ({wait / t:.0%}), read from the upper "
            f"tail of {len(delays.draws)} measured per-rank delays: its sampling error (within "
            "the 90% interval) can exceed the rest of the model's; profile more steps (or "
            "ranks) to narrow it"
        )
    return None
