"""Pipeline-parallel p2p nodes: the representative rank's send/recv kernels per step in, one
law in N for their time out.

Why not the collectives' model: a stage's recv kernel is launched ahead and runs until the
neighbouring stage's activation (or gradient) arrives, so its time is the pipeline's
dependency on the other stages (fill, drain, the per-microbatch transfers), not a transfer
plus a wait for the slowest rank. Read as a collective, the skew between stages (they run
different programs) became rank-to-rank variability and the alpha-beta ratio of a
two-rank group kept each node's time as measured. With a fixed global batch, DP replicas
run fewer microbatches as N grows: the p2p nodes' count per step changes with N (as
``kernel_pools`` pools kernels whose count changes), and their total per step is fitted as
one law: ``a`` the bubble (fill and drain do not shrink), ``b/N`` the per-microbatch part.
Interleaved schedules (virtual stages) read their chunks per rank here too
(``laws.interleave``): the fill and drain rebuilt per chunk pass, the starved passes of a
ring with fewer microbatches than stages added to the law.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tracescale.classify.collectives import pipeline_transfers
from tracescale.ingest.groups import key_members
from tracescale.replay.engine.run import RunReplay
from tracescale.replay.graph.build import DEV
from tracescale.replay.laws.interleave import chunk_passes, chunk_reading, peer_counts, with_starved
from tracescale.replay.laws.nodes import Law, fit_form, fit_law
from tracescale.replay.links.mesh import PP, Mesh, MeshDim


def p2p_rows(coll: Any) -> npt.NDArray[np.bool_]:
    """Which rows of a run's ``coll`` table are pipeline p2p nodes (send/recv between two
    ranks)."""
    if not len(coll):
        return np.zeros(0, dtype=np.bool_)
    return pipeline_transfers(coll["collective"].to_numpy(), coll["group"].to_numpy())


def p2p_time(run: RunReplay) -> float:
    """Seconds per kept step the representative rank spends in p2p nodes (wait + transfer)."""
    rows = p2p_rows(run.coll)
    if not rows.any():
        return 0.0
    g = run.graph
    nodes = run.coll["node"].to_numpy()[rows]
    step = g.step[nodes]
    kept = run.kept
    ok = (step >= 0) & kept[np.clip(step, 0, None)]
    return float(g.dur[nodes[ok]].sum()) / 1e9 / max(int(kept.sum()), 1)


def fit_p2p_law(
    runs: Sequence[RunReplay], mesh: Mesh | None = None, gpus_per_node: int | None = None
) -> Law | None:
    """The p2p nodes' law across the runs (:func:`p2p_law`; None where no run has any), with an
    interleaved ``mesh``'s starved passes (:func:`interleaved_law`, read on the largest run).

    Only the runs whose stage boundaries cross nodes as the largest run's do are fitted
    (:func:`crossing_boundaries`): a stage-major layout (Megatron's: a stage's DP replicas on
    consecutive ranks) puts more boundaries across nodes as DP grows, each crossing slows
    every microbatch's hop, and a law through runs on different links reads that as growth
    with N (a pipeline across 4-GPU nodes, measured at 4, 8, 16: projected 46-81% slow). A run
    whose hop is as fast as the largest run's stays (links as fast across nodes). The
    largest run's links are the targets' once every boundary crosses, or none does. Where it
    alone has them, its fill and drain (:func:`rebuilt_bubble`) is the law's ``a`` and the rest
    its per-microbatch part."""
    with_p2p = [r for r in runs if p2p_rows(r.coll).any()]
    if not with_p2p:
        return None
    top = with_p2p[-1]
    stages = pipeline_shape(mesh.at(top.world_size))[0] if mesh else 0
    state = crossing_boundaries(top, stages, gpus_per_node)
    hop = _hop(top)
    same = [
        r for r in with_p2p
        if crossing_boundaries(r, stages, gpus_per_node) == state
        or abs(_hop(r) - hop) <= SAME_HOP * hop  # links as fast across nodes as inside one
    ]  # fmt: skip
    if len(same) == 1 and len(with_p2p) > 1 and state is not None and mesh is not None:
        law = one_link_law(top, mesh.at(top.world_size))
    else:
        use = same if len(same) >= 2 else with_p2p
        law = p2p_law([r.world_size for r in use], [p2p_time(r) for r in use])
    return interleaved_law(law, top, mesh.at(top.world_size)) if mesh else law


#: Two runs' hops (one activation's transfer) within this share of each other are the same link.
SAME_HOP = 0.25


def _hop(run: RunReplay) -> float:
    """One activation's transfer on ``run``'s representative stage (:func:`stage_reading`'s
    ``x``; 0 where it cannot be read)."""
    got = stage_reading(run)
    return got[2] if got is not None else 0.0


def peer_stride(run: RunReplay) -> int | None:
    """The rank stride between the representative rank's send/recv peers (the ranks in their
    group keys: a stage-major layout's DP size, 1 where a replica's stages are consecutive);
    None where a key holds no pair of members."""
    if "pg" not in run.coll:
        return None
    strides = []
    for key in set(run.coll["pg"].astype(str)[p2p_rows(run.coll)].tolist()):
        members = key_members(key)
        if members is None or len(members) != 2:
            return None
        strides.append(abs(members[1] - members[0]))
    return min((s for s in strides if s > 0), default=None)


def _crossing(stride: int, stages: int, gpus_per_node: int) -> int:
    """Replica 0's stage boundaries whose two ranks (``stride`` apart) sit on different nodes."""
    return sum((s * stride) // gpus_per_node != ((s + 1) * stride) // gpus_per_node
               for s in range(stages - 1))  # fmt: skip


def crossing_boundaries(run: RunReplay, stages: int, gpus_per_node: int | None) -> int | None:
    """How many of replica 0's ``stages - 1`` stage boundaries join ranks on different nodes
    (:func:`peer_stride`); None where the node size, the stage count or the peers are
    unknown."""
    stride = peer_stride(run) if gpus_per_node and stages >= 2 else None
    return _crossing(stride, stages, gpus_per_node) if stride and gpus_per_node else None


def crossings_at(
    run: RunReplay, stages: int, gpus_per_node: int | None, n: int
) -> tuple[int, int] | None:
    """(boundaries crossing nodes in ``run``, at ``n`` ranks) in a stage-major layout, whose
    peers' stride is the DP size and grows with N; None where the layout is not stage-major
    (the boundaries stay where they are) or cannot be read."""
    stride = peer_stride(run) if gpus_per_node and stages >= 2 else None
    if not stride or not gpus_per_node or stride * stages != run.world_size:
        return None
    now = _crossing(stride, stages, gpus_per_node)
    return now, _crossing(stride * n // run.world_size, stages, gpus_per_node)


def crossing_warning(
    run: RunReplay, mesh: Sequence[MeshDim], gpus_per_node: int | None, targets: Sequence[int]
) -> str | None:
    """A sentence naming the targets whose stage boundaries cross nodes more than the largest
    run's do, where the hops keep the largest run's pace: the point projection there is
    optimistic (the interval's slow end takes the unmeasured inter-node hop,
    :func:`unmeasured_hop_factor`)."""
    stages = pipeline_shape(mesh)[0]
    more = [
        (n, got[0]) for n in targets
        if (got := crossings_at(run, stages, gpus_per_node, n)) is not None and got[1] > got[0]
    ]  # fmt: skip
    if not more:
        return None
    return (
        f"projections at N={[n for n, _ in more]} put more pipeline stage boundaries across "
        f"nodes ({gpus_per_node} GPUs per node) than any measured run ({more[0][1]} of "
        f"{stages - 1}): the stages' hops keep the largest run's pace there, so those "
        "projections are optimistic (measure a run where every boundary crosses nodes)"
    )


def unmeasured_hop_factor(
    run: RunReplay, mesh: Sequence[MeshDim], gpus_per_node: int | None, n: int, slowdown: float
) -> float:
    """How much slower the p2p nodes may run at ``n`` where more stage boundaries cross nodes
    than in ``run`` and no inter-node link was measured: each newly crossing boundary's share
    of the hops ``slowdown`` times as slow (the unmeasured inter-node link's bandwidth floor);
    1 where no boundary crosses anew."""
    stages = pipeline_shape(mesh)[0]
    got = crossings_at(run, stages, gpus_per_node, n)
    if got is None or got[1] <= got[0]:
        return 1.0
    return 1.0 + (got[1] - got[0]) / (stages - 1) * (slowdown - 1.0)


def crossing_hop(
    runs: Sequence[RunReplay], mesh: Mesh, gpus_per_node: int | None
) -> tuple[float, float] | None:
    """(seconds, bytes) of one activation's hop on the largest run whose every stage boundary
    crosses nodes (:func:`stage_reading`'s ``x``, the p2p rows' median message); None where no
    run's does. Where no collective crossed nodes, this is the one reading of the inter-node
    link the study holds (``links.hop_link``)."""
    for run in reversed(runs):
        rows = p2p_rows(run.coll)
        stages = pipeline_shape(mesh.at(run.world_size))[0]
        if not rows.any() or stages < 2:
            continue
        if crossing_boundaries(run, stages, gpus_per_node) != stages - 1:
            continue
        x = _hop(run)
        nbytes = float(np.median(run.coll["bytes"].to_numpy()[rows]))
        if x > 0 and nbytes > 0:
            return x, nbytes
    return None


def one_link_law(run: RunReplay, mesh: Sequence[MeshDim]) -> Law:
    """``a + b/N`` through ``run``'s p2p time alone, ``a`` its rebuilt fill and drain (at most
    the measured time); the runner-up, for the model-form spread, twice that fill (the fill
    read on one stage, stages assumed balanced). None readable: ``b/N`` alone, the runner-up
    the constant."""
    stages, virtual = pipeline_shape(mesh)
    now = p2p_time(run)
    fill = rebuilt_bubble(run, stages, virtual) if stages else None
    n = float(run.world_size)
    if fill is None:
        return Law("b/N", (now * n,), "a", (now,), 0.0)
    a = min(max(fill, 0.0), now)
    wide = min(2 * a, now)
    return Law("a+b/N", (a, (now - a) * n), "a+b/N", (wide, (now - wide) * n), 0.0)


def p2p_law(sizes: Sequence[float], values: Sequence[float]) -> Law:
    """``a + b/N`` over the p2p time per step at each N, whatever form the leave-one-out
    choice would pick (it stays the runner-up, for the model-form spread).

    Why forced: a pipeline fills and drains at any N, so its p2p time has a constant part;
    with few stages it is small next to the microbatches' part at the measured N, and the
    one-standard-error tie rule read it as ``b/N``, though it is what grows in share with N."""
    law = fit_law(sizes, values)
    if law.form == "a+b/N" or len(set(sizes)) < 2:
        return law
    return Law("a+b/N", fit_form("a+b/N", sizes, values), law.form, law.coef, law.cv_error)


def fixed_tail(run: RunReplay) -> npt.NDArray[np.bool_]:
    """Per node of ``run``'s graph: microbatch work after the step's last p2p dependency,
    which keeps its measured time at any N.

    Why: with a fixed global batch, N shrinks the count of microbatches, not their size; the
    kernel laws' ``b/N`` is that count, spread in the replay over the measured microbatches.
    Before a stage's last recv of the step the p2p law holds the pipeline's pace; after it
    the stage runs one microbatch's work (the last backward, on the last stage the last
    forward and backward) of fixed size, which the law's ratio would shrink. Which: the
    kernels on the stream of the step's last node gated by a p2p node (its cross-stream
    producer), from that node on, whose kernel group repeats in the step (microbatch work;
    an optimizer kernel once per step keeps its own law)."""
    g = run.graph
    out = np.zeros(len(g), dtype=np.bool_)
    rows = p2p_rows(run.coll)
    if not rows.any():
        return out
    p2p = np.zeros(len(g), dtype=np.bool_)
    p2p[run.coll["node"].to_numpy()[rows]] = True
    gated = (g.kind == DEV) & (g.dep2 >= 0) & p2p[np.clip(g.dep2, 0, None)] & ~p2p
    dev = (g.kind == DEV) & ~p2p
    for k in range(len(g.step_first)):
        in_step = g.step == k
        last = np.flatnonzero(gated & in_step)
        if not len(last):
            continue
        at = last[np.argmax(g.start[last])]
        mine = np.flatnonzero(dev & in_step & (g.res == g.res[at]))
        counts = np.bincount(g.group[mine], minlength=len(g.groups))
        tail = mine[(g.start[mine] >= g.start[at]) & (counts[g.group[mine]] >= 2)]
        out[tail] = True
    return out


def stage_reading(run: RunReplay) -> tuple[dict[str, float], float, float] | None:
    """The representative stage's send/recv nodes per step per neighbour pair, one chunk pass's
    compute (seconds: microbatch work per step, kernel groups that repeat in every kept step,
    over the chunk passes per step, ``interleave.chunk_passes``) and ``x``, the quarter-quantile
    p2p node (a send, or a recv that did not wait: one activation's transfer); None where the
    stage shows no pass."""
    rows = p2p_rows(run.coll)
    if not rows.any() or "pg" not in run.coll:
        return None
    g = run.graph
    kept = run.kept
    steps = int(kept.sum())
    in_kept = (g.step >= 0) & kept[np.clip(g.step, 0, None)]
    all_nodes = run.coll["node"].to_numpy()
    ok = in_kept[all_nodes] & rows
    counts = peer_counts(run.coll, ok, steps)
    passes = chunk_passes(counts)
    if passes < 1:
        return None
    coll = np.zeros(len(g), dtype=np.bool_)
    coll[all_nodes] = True
    mine = np.flatnonzero((g.kind == DEV) & in_kept & ~coll)
    per_step = np.zeros((steps, len(g.groups)))
    step_of = np.cumsum(kept) - 1
    np.add.at(per_step, (step_of[g.step[mine]], g.group[mine]), 1.0)
    repeats = per_step.min(axis=0) >= 2  # in every kept step, more than once: microbatch work
    work = float(g.dur[mine[repeats[g.group[mine]]]].sum()) / 1e9 / steps
    x = float(np.quantile(g.dur[all_nodes[ok]], 0.25)) / 1e9
    return counts, work / passes, x


def read_virtual(run: RunReplay) -> int | None:
    """Model chunks per rank of ``run``'s representative stage (``interleave.chunk_reading``);
    None without p2p nodes or where its counts cannot tell."""
    got = stage_reading(run)
    return chunk_reading(got[0]) if got is not None else None


def rebuilt_bubble(run: RunReplay, stages: int, virtual: int = 1) -> float | None:
    """Seconds per step the representative stage waits on the others at infinite N: the 1F1B
    schedule rebuilt with the microbatch count divided away (None where it cannot be read).

    Why not the p2p law's ``a``: with a fixed global batch, N divides the count of microbatches
    per replica, m = M / DP, and a balanced 1F1B step is a line in m: ``(m + p - 1)`` forward and
    backward times plus the hops between stages. Amdahl's limit is its intercept, the fill and
    drain ``(p - 1) (t_f + t_b + 2 x)`` (each stage idles ``p - 1`` forward and backward times
    of the others, and the fill and drain each cross ``p - 1`` links). The law fitted on the
    measured p2p time holds the waits of noisy stages per microbatch (their slowest, steeper
    than the fill's) and the other stages' data loading; scaled down to its ``a`` it put a
    quarter to most of the bubble elsewhere. Interleaved (``virtual`` v chunks per rank): the
    stage idles ``p - 1`` chunk passes, ``(p - 1) (t_f + t_b) / v``, and a microbatch crosses
    ``v p - 1`` links each way: ``2 (v p - 1) x``. Read from this stage's graph, stages assumed
    balanced (the replay sees one): one chunk pass and ``x`` by :func:`stage_reading`."""
    got = stage_reading(run) if stages >= 2 else None
    if got is None:
        return None
    _, chunk_s, x = got
    return (stages - 1) * chunk_s + 2 * (max(virtual, 1) * stages - 1) * x


def pipeline_shape(mesh: Sequence[MeshDim]) -> tuple[int, int]:
    """(stages, model chunks per rank) of a run's mesh; (0, 1) without a readable pipeline
    (chunks not read: 1, plain 1F1B)."""
    pp = [d for d in mesh if d.dimension == PP]
    if not pp or not pp[0].size:
        return 0, 1
    return int(pp[0].size), int(pp[0].virtual or 1)


def bubble_ratio(run: RunReplay, mesh: Sequence[MeshDim]) -> float | None:
    """At infinite N, ``run``'s p2p nodes' time as a ratio to their measured time: the fill and
    drain rebuilt for the stage count and chunks of its ``mesh`` (:func:`rebuilt_bubble`); None
    where the stage count or the stage's passes cannot be read (the p2p law's limit then)."""
    stages, virtual = pipeline_shape(mesh)
    got = rebuilt_bubble(run, stages, virtual) if stages else None
    now = p2p_time(run)
    return got / now if got is not None and now > 0 else None


def interleaved_law(law: Law, run: RunReplay, mesh: Sequence[MeshDim]) -> Law:
    """The p2p ``law`` of an interleaved pipeline with the starved chunk passes where a replica
    runs fewer microbatches than stages (``interleave.StarvedLaw``); 1F1B: ``law``."""
    stages, virtual = pipeline_shape(mesh)
    got = stage_reading(run) if virtual > 1 else None
    if got is None:
        return law
    counts, chunk_s, _ = got
    return with_starved(law, stages, virtual, chunk_passes(counts), run.world_size, chunk_s)
