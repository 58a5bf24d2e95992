"""Projection through the replay: the largest measured run's graph, every node rescaled to N.

- kernels and host gaps: their group's law (``laws.py``), as a ratio to the largest measured N;
- runtime calls, launch latencies, sync return latencies: constant;
- collectives: measured transfer times the ratio of the alpha-beta model (``comm.py``) at the
  new group size, tier and message size; plus the wait for the slowest rank: the instance
  starts when the slowest of N ranks arrives, ``E[max of N arrival offsets]`` after the mean
  arrival (``variability.lateness``: host delays pooled over the runs, device jitter from the
  largest run), so the representative rank waits that less its own offset; the slowest rank
  of the measured run is not counted twice ("rank-to-rank variability");
- every measured step of the representative rank is replayed, so a cycle of steps (gradient
  accumulation: three steps without collectives, one with) is projected as the cycle it is.

Intervals: a bootstrap over the replayed steps, widened by the replay under each group's
runner-up law (model-form spread) and by the laws' cross-validated error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tracescale.categories import CATEGORIES
from tracescale.replay.arrivals.slowest_rank import SlowestRankWaits, first_key
from tracescale.replay.arrivals.variability import lateness
from tracescale.replay.engine.cycles import bootstrap_mean, weighted_mean
from tracescale.replay.engine.late import late_waits, replay_late
from tracescale.replay.engine.run import RunReplay
from tracescale.replay.engine.schedule import Replayed, replay
from tracescale.replay.graph.build import DEV, GAP
from tracescale.replay.laws.nodes import CONSTANT, Law
from tracescale.replay.laws.p2p import (
    bubble_ratio,
    fixed_tail,
    p2p_rows,
    unmeasured_hop_factor,
)
from tracescale.replay.laws.work_scales import work_scales
from tracescale.replay.links.links import UNMEASURED_INTER_BANDWIDTH_FLOOR, CommModel
from tracescale.replay.links.mesh import Mesh
from tracescale.replay.links.tiers import tier_warning as tier_warning
from tracescale.replay.links.topology import INTER
from tracescale.replay.serial_parts import (
    BUBBLE,
    EXPERTS,
    all_to_all_rows,
    by_cause,
    step_bubble,
    step_categories,
    step_sums,
    systematic_wait,
)
from tracescale.replay.uncertainty.delays import DelayModel
from tracescale.replay.uncertainty.intervals import combine_ends

F64 = npt.NDArray[np.float64]
#: Smallest relative model error per doubling of N assumed in the intervals: laws fitted on a
#: few world sizes are never known better than this when extrapolated. Measured: the 90th
#: percentile of |log(projected / true speedup)| per doubling over 98 independently built
#: studies (every pattern and trace variant, 2x-8x the largest run) is 1.8-2.7%.
_MIN_ERROR = 0.02


#: Most node-duration arrays :meth:`ReplayStudy.split_durations` keeps (the latest asked):
#: a projection asks for its world size's few variants together, so a few suffice.
SPLITS_KEPT = 8
#: Bytes of those arrays one study keeps at most (never fewer than the latest entry): each
#: entry is six arrays per node, and the levers' scenario studies each keep
#: their own. On a 1.4M-node graph (a 200 MB rank) eight entries in each of six studies were
#: most of a whole analyze's peak (1.2 GB of 1.7 GB).
SPLIT_BYTES = 64 * 2**20
#: An entry's bytes per node: the durations, waits, anchors and offsets (32) and the replay's
#: starts and ends (16), kept only where one whole entry fits in ``SPLIT_BYTES`` (the replay
#: memo saves a few repeated replays of a small graph; on a 1.4M-node graph it held 135 MB).
ENTRY_BYTES_PER_NODE = 48


@dataclass(frozen=True)
class ReplayPoint:
    """Projected step at one world size."""

    world_size: int
    step_time_s: float
    ci90: tuple[float, float]
    variability_s: float  # mean seconds per step the representative rank waits for others
    per_step_s: tuple[float, ...]


@dataclass(frozen=True)
class ReplayStudy(SlowestRankWaits):
    """Fitted per-node laws and the communication model over a study's runs."""

    runs: tuple[RunReplay, ...]
    laws: dict[str, Law]
    comm: CommModel
    warnings: tuple[str, ...]
    #: |projected - measured| / measured at the largest N, projecting from the runs below it
    validation_error: float = 0.0
    _points: dict[tuple[int, int], ReplayPoint] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )
    #: Per-rank host delays pooled over the runs (the slowest of N ranks draws from them)
    delays: DelayModel | None = None
    _cache: dict[tuple[int, int, int, float, float], tuple[float, float, float]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )
    _parts: dict[int, dict[str, float]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )
    #: The pipeline p2p nodes' time per step (``laws.p2p``); None without such nodes
    p2p: Law | None = None
    _tail: list[npt.NDArray[np.bool_]] = field(
        default_factory=list, init=False, compare=False, repr=False
    )
    #: ``split_durations`` and ``replayed_steps`` by their arguments: a projection, its
    #: interval ends, the levers and the breakdown ask for the same world sizes many times
    _memo: dict[tuple[Any, ...], Any] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )
    #: Each measured run's parallelism mesh, read from the groups the size laws read
    mesh: Mesh = field(default_factory=lambda: Mesh((), ()))

    @property
    def base(self) -> RunReplay:
        return self.runs[-1]

    def durations(
        self,
        n: int,
        alt: bool = False,
        infinite: bool = False,
        comm_end: int = 0,
        tail_alt: int = 0,
    ) -> tuple[F64, float]:
        """Node durations (seconds) of the base graph at world size ``n``; variability per step.

        ``tail_alt``: -1/+1 take the low/high end of the slowest rank's growth (the upper
        tail's uncertainty) instead of its point estimate; ``comm_end``: -1/+1 every
        collective's alpha-beta at the low/high end of its latency's range."""
        dur, pre, var = self.split_durations(n, alt, infinite, comm_end, tail_alt)
        out: F64 = dur + pre
        return out, var

    def replayed_steps(self, n: int, **how: Any) -> F64:
        """The kept steps replayed at ``n`` (``how``: :meth:`split_durations`' options), each
        collective's wait for the slowest rank absorbed where its stream is busy longer."""
        key = ("steps", n, *sorted(how.items()))
        got = self._memo.get(key)
        if got is None:
            got = self.replay_at(n, **how).step_time[self.base.kept]
            got.flags.writeable = False
            self._memo[key] = got
        out: F64 = got
        return out

    def replay_at(self, n: int, **how: Any) -> Replayed:
        """The base graph replayed at ``n`` (``how``: :meth:`split_durations`' options), the
        slowest rank's lateness carried to the step's later collectives (``engine.late``);
        kept as the durations are (a breakdown asks again for the replay its steps came from)."""
        got = self._memo.get(("replay", n, *_how_key(how)))
        if got is None:
            dur, pre, _ = self.split_durations(n, **how)
            anchor, late = self._memo[("late", n, *_how_key(how))]
            # an interval's end often changes nothing (a law without a rival, links whose
            # ends agree, delays that reach no collective): the same inputs replay once
            inputs = (dur, pre, anchor, late)
            key = ("content", *(float(np.sum(a)) for a in inputs))
            hit = self._memo.get(key)
            if hit is not None and all(map(np.array_equal, hit[0], inputs)):
                got = hit[1]
            else:
                got = replay_late(self.base.graph, *inputs)
            if ENTRY_BYTES_PER_NODE * len(self.base.graph) <= SPLIT_BYTES:
                self._memo[("replay", n, *_how_key(how))] = got
                self._memo[key] = (inputs, got)
        out: Replayed = got
        return out

    def split_durations(
        self,
        n: int,
        alt: bool = False,
        infinite: bool = False,
        comm_end: int = 0,
        tail_alt: int = 0,
    ) -> tuple[F64, F64, float]:
        """:meth:`durations` with each collective's wait for the slowest rank apart: (node
        durations, waits before them, variability per step); read-only arrays."""
        key = ("split", n, alt, infinite, comm_end, tail_alt)
        got = self._memo.get(key)
        if got is None:
            *got, late = self._split_durations(n, alt, infinite, comm_end, tail_alt)
            got[0].flags.writeable = False
            got[1].flags.writeable = False
            self._memo[key] = got = tuple(got)
            self._memo[("late", n, alt, infinite, comm_end, tail_alt)] = late
            entry = ENTRY_BYTES_PER_NODE * max(len(got[0]), 1)
            keep = max(1, min(SPLITS_KEPT, SPLIT_BYTES // entry))
            for kind in ("split", "late", "replay", "content"):
                kept = [k for k in self._memo if k[0] == kind]
                for old in kept[: max(len(kept) - keep, 0)]:
                    del self._memo[old]  # arrays per node: a million-step graph's are GBs
        out: tuple[F64, F64, float] = got
        return out

    def _split_durations(
        self, n: int, alt: bool, infinite: bool, comm_end: int, tail_alt: int
    ) -> tuple[F64, F64, float, tuple[npt.NDArray[np.int64], F64]]:
        base = self.base
        g = base.graph
        ref = base.world_size
        dur = g.dur / 1e9
        ratio = np.ones(len(g.groups))
        for k, name in enumerate(g.groups):
            law = self.laws.get(name, CONSTANT)
            ratio[k] = law.ratio(1e12 if infinite else n, ref, alt) if law is not CONSTANT else 1.0
        scaled = np.where(np.isin(g.kind, [GAP, DEV]), dur * ratio[g.group], dur)
        if self.p2p is not None and not infinite:  # a pipeline's last microbatch keeps its size
            if not self._tail:
                self._tail.append(fixed_tail(base))
            scaled = np.where(self._tail[0], dur, scaled)
        if len(base.delay_node):  # the rank at a typical host delay
            at = base.delay_node
            scaled[at] = np.maximum(dur[at] - base.delay_excess, 0.0) * ratio[g.group[at]]
            if infinite and self.delays is not None:
                # each rank's own mean delay is serial (the pooled delays' mean over their
                # median: the draws', unbiased, not the fitted tail's, whose shape a few dozen
                # draws hardly pin down); the slowest of N's excess over it is an overhead
                mean = max(float(np.mean(self.delays.draws)), 0.0) / max(self.delays.steps, 1)
                mean *= self._work_scales(10**12)[0] ** self.delays.work_power
                share = base.delay_share if len(base.delay_share) == len(at) else 1.0
                np.add.at(scaled, at, mean * share)
        var_total = 0.0
        pre = np.zeros(len(dur))
        carried = (np.full(len(dur), -1, dtype=np.int64), np.zeros(len(dur)))
        power = self.delays.work_power if self.delays is not None else 1.0
        c = base.coll
        if len(c):
            host_scale, dev_scale = self._work_scales(n, alt)
            cols = self._coll_columns()
            nodes = cols["node"]
            new = np.empty(len(c))
            waits = np.zeros(len(c))
            host = np.zeros(len(c))
            sizes = np.ones(len(c))  # each group's size at n
            p2p_law = self.p2p or CONSTANT
            bubble = self._bubble_ratio() if infinite else None
            r = p2p_law.ratio(1e12 if infinite else n, ref, alt)  # every p2p row's
            for i, row in enumerate(cols["rows"]):
                (kind, algo, size_b, group, pg, position, transfer, wait, systematic, rest,
                 host_part, own_delay) = row  # fmt: skip
                if cols["p2p"][i]:  # the pipeline's dependency: its own law, no slowest-rank wait
                    new[i] = (transfer + wait) * (r if bubble is None else bubble)
                    if comm_end > 0 and not infinite:  # the links' slow end: unmeasured hops
                        new[i] *= self._hop_factor(n)
                    continue
                if infinite:  # transfers vanish; a wait for a rank late every step stays
                    new[i] = systematic_wait(base.offsets, position, group, wait, systematic)
                    continue
                args = (kind, algo, size_b, group)
                model_ref = self.comm.transfer(*args, ref, ref, comm_end, pg)
                model_n = self.comm.transfer(*args, ref, n, comm_end, pg)
                t = transfer * model_n / model_ref if model_ref > 0 else model_n
                w = wait
                if int(group) > 1 and position in base.offsets:
                    # the other reading: the whole spread is jitter of the device work
                    hs = dev_scale if alt else host_scale**power
                    size = sizes[i] = self.comm.group_at(group, pg, ref, n)
                    terms = self._wait_terms(position, n, size, hs, dev_scale)
                    late = terms[tail_alt + 1]
                    # a pipeline's rank replayed at a typical delay still arrives as late as
                    # its recv waits say (its chain's lateness less its own delay)
                    kept = host_part - own_delay if len(base.offsets[position].slack) else 0.0
                    w = max(late - systematic - rest * dev_scale - kept, 0.0)
                    w = w if size > 1 else 0.0  # a group of one waits for no one
                    if not infinite and position == self._memo.get(first_key(hs, dev_scale)):
                        # the host delays' part of the first-reached wait, carried through
                        # the step (``engine.late``); the rest is measured at each position
                        k = max(1, min(n, round(size)))
                        late0 = lateness(self._pools()[position], None, k, hs, dev_scale)
                        host[i] = max(w - max(late0 - systematic - rest * dev_scale, 0.0), 0.0)
                var_total += w
                new[i] = t
                waits[i] = w
            scaled[nodes] = new
            pre[nodes] = waits
            if not infinite:
                hs = dev_scale if alt else host_scale**power
                first = self._memo.get(first_key(hs, dev_scale))
                eligible = ~np.asarray(cols["p2p"], dtype=np.bool_) & (cols["group"] > 1)
                joined = self._join_lateness(n, sizes, hs, dev_scale, tail_alt + 1)
                carried = late_waits(g, nodes, cols["position"], host, first, eligible, joined)
                # the slowest of the joined groups is waited for once in a step that joins
                if joined.any():
                    at = g.step[nodes]
                    per_step = np.zeros(int(at.max()) + 1)
                    np.maximum.at(per_step, np.clip(at, 0, None), joined)
                    var_total += float(per_step.sum())
        steps = max(int(np.isfinite(base.measured).sum()), 1)
        return scaled, pre, var_total / steps, carried

    def _hop_factor(self, n: int) -> float:
        """The p2p nodes' slow-end factor at ``n`` (``laws.p2p.unmeasured_hop_factor``): where
        stage boundaries cross nodes anew and no inter-node link was measured."""
        key = ("hop", n)
        if key not in self._memo:
            measured = INTER in self.comm.measured_tiers or self.comm.user_inter is not None
            self._memo[key] = (
                1.0
                if measured
                else unmeasured_hop_factor(
                    self.base,
                    self.mesh.at(self.base.world_size),
                    self.comm.gpus_per_node,
                    n,
                    1.0 / UNMEASURED_INTER_BANDWIDTH_FLOOR,
                )
            )
        out: float = self._memo[key]
        return out

    def _bubble_ratio(self) -> float | None:
        """At infinite N, the p2p nodes' time over the largest run's (``laws.p2p.bubble_ratio``)."""
        if ("bubble",) not in self._memo:
            self._memo[("bubble",)] = bubble_ratio(self.base, self.mesh.at(self.base.world_size))
        out: float | None = self._memo[("bubble",)]
        return out

    def _work_scales(self, n: int, alt: bool = False) -> tuple[float, float]:
        """How the base run's host gaps and kernels, in total, scale from N_max to ``n``."""
        return work_scales(self.base, self.laws, n, alt)

    def project(self, n: int, seed: int = 0) -> ReplayPoint:
        """Projected step at ``n`` ranks with its interval (cached: the curve repeats targets)."""
        got = self._points.get((n, seed))
        if got is None:
            got = self._points[(n, seed)] = self._project(n, seed)
        return got

    def step_time(self, n: int) -> float:
        """The projected step at ``n`` without its interval: :meth:`project`'s point alone, for
        a reader that needs no interval (each end replays the step again)."""
        return weighted_mean(self.replayed_steps(n), self.base.weights)

    def _project(self, n: int, seed: int) -> ReplayPoint:
        var = self.split_durations(n)[2]
        w = self.base.weights
        steps = self.replayed_steps(n)
        alt = self.replayed_steps(n, alt=True)
        t = weighted_mean(steps, w)
        lo, hi = bootstrap_mean(steps, seed + n, t, self.base.strata, w)
        t_alt = weighted_mean(alt, w)
        # each alpha-beta at either end of its range (an unidentified or unmeasured link)
        t_comm = [weighted_mean(self.replayed_steps(n, comm_end=k), w) for k in self.comm.ends()]
        doublings = abs(np.log2(max(n, 1) / self.base.world_size))
        # Model error per doubling of N: the laws' cross-validated error, and the measured miss
        # of the same method projecting the next-largest run to the largest (at least 1%).
        per_doubling = max(self._cv_share() / 4.0, self.validation_error, _MIN_ERROR)
        u = per_doubling * doublings
        t_tail = [weighted_mean(self.replayed_steps(n, tail_alt=k), w) for k in (-1, 1)]
        # the step mix a window without a whole cycle could hide
        # (``replay.engine.cycles.StepMix.ends``)
        t_mix = [weighted_mean(steps, mix) for mix in self.base.mix_weights]
        sources = [
            (float(lo), float(hi)),  # the steps' sampling
            (t_alt, t / (1 + u), t * (1 + u)),  # the laws' form and error
            tuple(t_comm),  # the links' unidentified latencies
            tuple(t_tail),  # the delays' tail
            tuple(t_mix),  # the step mix
        ]
        return ReplayPoint(n, t, combine_ends(t, sources), var, tuple(float(x) for x in steps))

    def _cv_share(self) -> float:
        """Time-weighted cross-validated error of the laws (relative)."""
        total = sum(self.base.group_time.values())
        if total <= 0:
            return 0.0
        return (
            sum(t * self.laws.get(g, CONSTANT).cv_error for g, t in self.base.group_time.items())
            / total
        )

    def serial_time(self) -> float:
        """T_inf: the step with parallel work and transfers gone (floors, launches and the
        waits for a systematically late rank stay)."""
        return self.serial_time_interval()[0]

    def serial_parts(self) -> dict[str, float]:
        """T_inf per category (seconds of the mean step): the replayed step at infinite N
        classified by the attribution rules (``replay.serial_parts``); they sum to T_inf."""
        got = self._parts.get(0)
        if got is None:
            base = self.base
            dur = self.durations(1, infinite=True)[0]
            rep = replay(base.graph, dur)
            per_step = step_categories(base.graph, rep)[base.kept]
            p2p = p2p_rows(base.coll)
            a2a = all_to_all_rows(base.coll) & ~p2p
            nodes = base.coll["node"].to_numpy() if len(base.coll) else np.zeros(0, np.int64)
            rest = ~p2p & ~a2a
            waits = step_sums(base.graph, nodes[rest], dur[nodes[rest]])[base.kept]
            mean = [weighted_mean(per_step[:, j], base.weights) for j in range(len(CATEGORIES))]
            parts = dict(zip(CATEGORIES, mean, strict=True))
            # the pipeline's fill and drain, and the wait for the busiest expert rank: parts
            # of their own, out of communication (time those nodes run with no other device work)
            for line, rows in ((BUBBLE, p2p), (EXPERTS, a2a)):
                if rows.any():
                    mask = np.zeros(len(base.graph), dtype=np.bool_)
                    mask[nodes[rows]] = True
                    alone = step_bubble(base.graph, rep, mask)[base.kept]
                    parts[line] = weighted_mean(alone, base.weights)
                    parts["communication"] -= parts[line]
            kept = weighted_mean(waits, base.weights)
            got = self._parts[0] = by_cause(parts, kept, base.caused)
        return got

    def serial_time_interval(self, seed: int = 0) -> tuple[float, float, float]:
        """T_inf and its 90% interval: bootstrap over the replayed steps, widened by the replay
        under each group's runner-up law (whose constant part may differ: model-form spread).
        The point is the sum of :meth:`serial_parts`."""
        kept = self.base.kept
        w = self.base.weights
        rep = replay(self.base.graph, self.durations(1, infinite=True)[0])
        steps = step_categories(self.base.graph, rep)[kept].sum(axis=1)
        alt_dur = self.durations(1, alt=True, infinite=True)[0]
        t_alt = weighted_mean(replay(self.base.graph, alt_dur).step_time[kept], w)
        t = weighted_mean(steps, w)
        lo, hi = bootstrap_mean(steps, seed, t, self.base.strata, w)
        return t, min(lo, t_alt, t), max(hi, t_alt, t)


def _how_key(how: dict[str, Any]) -> tuple[Any, ...]:
    """``split_durations``' options in its memo key's order, defaults filled in."""
    return (
        bool(how.get("alt", False)),
        bool(how.get("infinite", False)),
        int(how.get("comm_end", 0)),
        int(how.get("tail_alt", 0)),
    )
