"""The ``pp`` pattern: pipeline parallelism, ``pp_stages`` stages x DP replicas, 1F1B.

Why the schedule is simulated op by op: the bubble is not a parameter. Each stage runs its
own order of microbatch passes (1F1B: ``p - s - 1`` warm-up forwards, then one forward / one
backward, then the cool-down backwards), a pass on stage s waits for its input from stage
s - 1 (forward) or s + 1 (backward), and the idle that follows from that (fill, drain, every
late transfer) is what the trace shows and the truth counts.

Layout and sizes (stated conventions): rank = stage * DP + replica (pipeline outermost, as
Megatron orders it), so a stage's replicas are neighbouring ranks and N grows DP. A fixed
global batch of ``microbatches`` M: each replica runs m = M / DP per step in strong mode
(M per replica in weak mode), so compute shrinks with N while the fill and drain do not. One
microbatch's forward on one stage is ``fwd_time / (M p)`` (``bwd_time`` alike): at N = p the
stages split the model and the batch's work evenly. ``act_bytes`` go between stages per
microbatch (:mod:`tracescale.simulate.p2p`). After the last backward each stage AllReduces its
gradients (``model_bytes / p``) over its DP group (``dp_<s>``), then runs the optimizer over its
``1/p`` of the model (``opt_time / p``); every rank loads data (``dl_parallel / DP``).

Interleaved 1F1B (``virtual_stages`` v > 1): stage s holds chunks c = 0..v-1, virtual stage
``c p + s`` of ``v p``, each ``1/v`` of the stage's work; a microbatch crosses the ring of
stages v times (the last stage feeds the first). Each stage's order is Megatron-LM's: passes
grouped by ``p`` microbatches through chunk 0, then chunk 1, ...; ``2 (p - s - 1) + (v - 1) p``
warm-up forwards (at most the step's ``m v``), then alternating, backward passes taking the
chunks in reverse; m must be a multiple of p.
"""

from __future__ import annotations

import numpy as np

from tracescale.errors import UsageError
from tracescale.simulate import checkpointing, layers, p2p, stages
from tracescale.simulate import kernels as K
from tracescale.simulate.engine import Engine, Times
from tracescale.simulate.events import COMM_STREAM, COMPUTE_STREAM, RECV_STREAM
from tracescale.simulate.groups import Groups
from tracescale.simulate.params import SimParams
from tracescale.simulate.spec import PatternSpec

Pass = tuple[str, int, int]  # ("F" | "B", microbatch, chunk)
FORWARD = "PipelineStage.forward_step"
BACKWARD = "PipelineStage.backward_step"
FINALIZE = "DistributedDataParallel.finish_grad_sync"


def shape(params: SimParams, n: int, mode: str) -> tuple[int, int]:
    """(DP replicas, microbatches per replica per step) at ``n`` ranks; a usage error where the
    study cannot run that way."""
    p, big_m = params.pp_stages, params.microbatches
    if n % p:
        raise UsageError(f"pp: world size {n} is not a multiple of pp_stages={p}")
    dp = n // p
    if mode == "strong" and big_m % dp:
        raise UsageError(f"pp: microbatches={big_m} do not split over DP={dp} replicas (N={n})")
    m = big_m // dp if mode == "strong" else big_m
    if params.virtual_stages > 1 and m % p:
        raise UsageError(
            f"pp: interleaved 1F1B needs microbatches per replica ({m} at N={n}) to be a "
            f"multiple of pp_stages={p}"
        )
    return dp, m


def order(p: int, s: int, m: int, v: int) -> list[Pass]:
    """Stage s's passes in one step (plain 1F1B when v = 1; see the module docstring)."""
    forwards = [
        (i, c) for lo in range(0, m, p) for c in range(v) for i in range(lo, min(lo + p, m))
    ]
    backwards = [(i, v - 1 - c) for i, c in forwards]
    warm = min(p - s - 1 if v == 1 else 2 * (p - s - 1) + (v - 1) * p, len(forwards))
    out: list[Pass] = [("F", i, c) for i, c in forwards[:warm]]
    for k in range(len(forwards) - warm):
        i, c = forwards[warm + k]
        j, d = backwards[k]
        out += [("F", i, c), ("B", j, d)]
    return out + [("B", i, c) for i, c in backwards[len(forwards) - warm :]]


class Pipeline:
    """One step's passes of every stage, each run on its stage's ranks as inputs arrive."""

    def __init__(self, e: Engine, spec: PatternSpec, dp: int, m: int) -> None:
        p = e.p
        self.e, self.spec, self.dp, self.m = e, spec, dp, m
        self.p, self.v = p.pp_stages, p.virtual_stages
        self.layers = max(1, -(-p.layers // self.v))  # per chunk
        self.masks = [np.arange(e.n) // dp == s for s in range(self.p)]
        self.pairs = p2p.pair_groups(self.p, dp, self.v)
        self.sent: dict[tuple[str, int, int], Times] = {}  # (F|B, microbatch, to virtual stage)
        per_pass = 1e9 / (p.microbatches * self.p * self.v)
        self.fwd_ns, self.bwd_ns = p.fwd_time * per_pass, p.bwd_time * per_pass
        self.fwd_cum = K.cumulative(K.FWD_LAYER, self.layers)
        self.bwd_cum = K.cumulative(K.BWD_LAYER, self.layers)

    def _peer(self, s: int, q: int) -> np.ndarray:
        """Per rank: its peer on stage q (a rank of stage s; others map to themselves)."""
        ranks = np.arange(self.e.n)
        return np.where(self.masks[s], ranks + (q - s) * self.dp, ranks)

    def _pair(self, s: int, q: int) -> Groups:
        return self.pairs[(min(s, q), max(s, q))]

    def _recv(self, s: int, q: int, key: tuple[str, int, int]) -> None:
        e = self.e
        p2p.transfer(e, "recv", self.masks[s], self._peer(s, q), self._pair(s, q),
                     e.p.act_bytes, sent=self.sent[key])  # fmt: skip
        e.wait_for(COMPUTE_STREAM, RECV_STREAM, "c10d::wait")

    def _send(self, s: int, q: int, key: tuple[str, int, int]) -> None:
        e = self.e
        self.sent[key] = p2p.transfer(e, "send", self.masks[s], self._peer(s, q),
                                      self._pair(s, q), e.p.act_bytes)  # fmt: skip

    def run_pass(self, s: int, kind: str, i: int, c: int) -> None:
        e, p = self.e, self.p
        u, last = c * p + s, self.v * p - 1
        mask = self.masks[s]
        a = e.h.copy()
        fwd = self.fwd_ns * e.jitter()
        if kind == "F":
            if u > 0:
                self._recv(s, (s - 1) % p, ("F", i, u))
            for layer in range(self.layers):
                layers.layer_kernels(e, K.FWD_LAYER, fwd, layer, self.fwd_cum)
            if u < last:
                self._send(s, (s + 1) % p, ("F", i, u + 1))
            e.annotate("user_annotation", FORWARD, a)
            return
        if u < last:
            self._recv(s, (s + 1) % p, ("B", i, u))
        bwd = self.bwd_ns * e.jitter()
        for k, layer in enumerate(reversed(range(self.layers))):
            region = None
            if self.spec.has("act_ckpt"):
                region = checkpointing.open_region(e, fwd, layer, self.fwd_cum, mask)
            layers.layer_kernels(e, K.BWD_LAYER, bwd, k, self.bwd_cum)
            if region is not None:
                checkpointing.close_region(e, region)
        if u > 0:
            self._send(s, (s - 1) % p, ("B", i, u - 1))
        e.annotate("user_annotation", BACKWARD, a)

    def run(self) -> None:
        """Every stage's passes, each as soon as its input was sent (the order never stalls:
        1F1B's orders are deadlock-free)."""
        p, v = self.p, self.v
        todo = [order(p, s, self.m, v) for s in range(p)]
        at = [0] * p
        while any(at[s] < len(todo[s]) for s in range(p)):
            moved = False
            for s in range(p):
                while at[s] < len(todo[s]):
                    kind, i, c = todo[s][at[s]]
                    u, last = c * p + s, v * p - 1
                    needs = (kind == "F" and u > 0) or (kind == "B" and u < last)
                    if needs and (kind, i, u) not in self.sent:
                        break
                    with stages.only(self.e, self.masks[s]):
                        self.run_pass(s, kind, i, c)
                    at[s] += 1
                    moved = True
            if not moved:
                raise AssertionError("the pipeline schedule deadlocked")


def dp_groups(stages_: int, dp: int) -> Groups:
    """Each stage's data-parallel group (its replicas: neighbouring ranks)."""
    members = tuple(tuple(range(s * dp, (s + 1) * dp)) for s in range(stages_))
    return Groups("data_parallel", members, tuple(f"dp_{s}" for s in range(stages_)))


def step(e: Engine, spec: PatternSpec, index: int, first_step: int, mode: str) -> None:
    """One ProfilerStep of every rank of the pipeline."""
    p = e.p
    dp, m = shape(p, e.n, mode)
    accum = p.accum_steps if spec.has("grad_accum") else 1
    sync_step = index % accum == accum - 1
    e.begin_step()
    layers.load_batch(e, spec)
    Pipeline(e, spec, dp, m).run()
    if sync_step:
        if dp > 1:
            nel = int(p.model_bytes) // 4 // p.pp_stages
            e.collective("allreduce", nel, nel, 4 * nel, after=COMPUTE_STREAM,
                         group=dp_groups(p.pp_stages, dp))  # fmt: skip
            e.wait_for(COMPUTE_STREAM, COMM_STREAM, FINALIZE)
        layers.optimizer(e, p.opt_time / p.pp_stages)
    layers.close_step(e, first_step + index)
