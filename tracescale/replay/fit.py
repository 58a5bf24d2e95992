"""Fitting a study's replay: the measured runs' graphs in, a :class:`ReplayStudy` out (one law
per node group across N, the links' alpha-beta model, the pooled host delays, the pipeline's
p2p law and the mesh), validated by projecting the next-largest run to the largest.

Why apart from ``project``: fitting reads every run once; projecting asks the fitted study for
many world sizes. Keeping them apart keeps each readable on its own."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tracescale.replay.engine.run import RunReplay
from tracescale.replay.laws.kernel_pools import varying_kernel_laws
from tracescale.replay.laws.nodes import Law, fit_law
from tracescale.replay.laws.p2p import crossing_hop, fit_p2p_law, p2p_rows, read_virtual
from tracescale.replay.laws.work_scales import pooled_delays
from tracescale.replay.links.links import fit_comm, hop_link
from tracescale.replay.links.mesh import run_meshes
from tracescale.replay.links.tiers import same_tiers
from tracescale.replay.links.topology import group_roles
from tracescale.replay.project import ReplayStudy
from tracescale.table import Table, as_table, concat


def fit_replay(
    runs: Sequence[RunReplay],
    *,
    gpus_per_node: int | None = None,
    inter_bandwidth: float | None = None,
    inter_latency: float | None = None,
    validate: bool = True,
) -> ReplayStudy:
    """Laws per node group and the communication model from runs sorted by world size.

    ``validate``: also project the next-largest run's graph to the largest N with laws fitted
    without it, and keep the relative miss as ``validation_error`` (it widens the intervals).
    """
    runs = tuple(sorted(runs, key=lambda r: r.world_size))
    names = set().union(*(r.group_time for r in runs))
    laws: dict[str, Law] = {}
    for name in names:
        scale = name.startswith("kernel:")
        pts = [
            (r.world_size, r.group_time[name] / (r.device_factor if scale else 1.0))
            for r in runs
            if name in r.group_time
        ]
        laws[name] = fit_law([p[0] for p in pts], [p[1] for p in pts])
    laws.update(
        varying_kernel_laws(
            [r.world_size for r in runs], [r.kernels for r in runs], [r.device_factor for r in runs]
        )
    )
    # The pooled delays' tail tests are numpy work outside the GIL, most of a fit's time, and
    # read only the runs and the laws: they run beside the rest of the fit (the links, the
    # mesh, the validation fit and its replays, which are plain Python) and join it at the end.
    with ThreadPoolExecutor(max_workers=1) as beside:
        pooled = beside.submit(pooled_delays, runs, laws)
        study = _rest_of_fit(runs, laws, gpus_per_node, inter_bandwidth, inter_latency, validate)
        return dataclasses.replace(study, delays=pooled.result())


def _rest_of_fit(
    runs: tuple[RunReplay, ...],
    laws: dict[str, Law],
    gpus_per_node: int | None,
    inter_bandwidth: float | None,
    inter_latency: float | None,
    validate: bool,
) -> ReplayStudy:
    """:func:`fit_replay` past the laws, without the pooled delays."""
    # p2p nodes hold the pipeline's waits, not a transfer: no link is fitted on them
    frames = [
        as_table(r.coll)[~p2p_rows(r.coll)].assign(world_size=r.world_size)
        for r in runs
        if len(r.coll)
    ]
    inst = (
        concat(frames)
        if frames
        else Table(columns=["world_size", "collective", "algo", "bytes", "group", "transfer"])
    )
    comm = fit_comm(inst, gpus_per_node, inter_bandwidth, inter_latency)
    pipeline = {  # every run, with its send/recv groups (a pipeline's)
        r.world_size: sorted(set(r.coll["pg"].astype(str)[p2p_rows(r.coll)].tolist()))
        if len(r.coll) and "pg" in r.coll
        else []
        for r in runs
    }
    chunks = {r.world_size: read_virtual(r) for r in runs if pipeline[r.world_size]}
    mesh = run_meshes(inst, group_roles(inst, gpus_per_node), pipeline, gpus_per_node, chunks)
    comm = hop_link(comm, crossing_hop(runs, mesh, gpus_per_node))
    warnings: list[str] = []
    validation = 0.0
    if validate and len(runs) >= 3 and same_tiers(runs, gpus_per_node):
        sub = fit_replay(
            runs[:-1],
            gpus_per_node=gpus_per_node,
            inter_bandwidth=inter_bandwidth,
            inter_latency=inter_latency,
            validate=False,
        )
        top = runs[-1]
        measured = float(np.nanmean(top.measured)) if np.isfinite(top.measured).any() else 0.0
        if measured > 0:
            got = sub.step_time(top.world_size)
            validation = abs(got - measured) / measured
    return ReplayStudy(
        runs=runs,
        laws=laws,
        comm=comm,
        warnings=tuple(warnings),
        validation_error=validation,
        p2p=fit_p2p_law(runs, mesh, gpus_per_node),
        mesh=mesh,
    )
