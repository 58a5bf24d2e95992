"""ingest -> classify -> scale, end to end: the function behind ``tracescale analyze``.

Options, discovery and the study-level cache are :mod:`tracescale.preflight` (light); per-rank
work runs through :mod:`tracescale.parallel`; :mod:`tracescale.runs` groups the compact results
into runs; this module merges them per run, scales and replays each study and builds the
document (and stores it in the study cache).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tracescale.categories import CATEGORIES
from tracescale.classify.rank import RankResult
from tracescale.classify.result import RunBreakdown
from tracescale.classify.rules import load_rules
from tracescale.classify.run import build_run
from tracescale.classify.same_job import check_same_job, study_signatures
from tracescale.errors import InvalidTraceError, NoTracesError, TracescaleError
from tracescale.ingest import last_read
from tracescale.ingest.discover import RunSpec, StudySpec
from tracescale.ingest.sniff import DEFAULT_MEMORY_BUDGET
from tracescale.ingest.trace import RankTrace
from tracescale.parallel.mapping import run_tasks
from tracescale.parallel.tasks import RankTask, TaskError
from tracescale.preflight import Prepared, fail_on_rejected, parse_steps, prepare, store_document
from tracescale.replay.whatif.assumptions import assumed_laws
from tracescale.runs import run_groups, run_to_dict, select_steps, step_rows
from tracescale.scaling import analyze_scaling
from tracescale.scaling.result import ScalingResult, synced_with
from tracescale.study import Study, TypedParts, make_document
from tracescale.table import table_of

__all__ = [
    "ReplayOptions",
    "analyze",
    "analyze_study",
    "fail_on_rejected",
    "map_ranks",
    "parse_steps",
    "run_groups",
    "typed_parts",
]


def _run_breakdown(
    spec: RunSpec,
    results: dict[str, RankResult | TaskError],
    steps: slice | None,
    strict: bool,
) -> tuple[RunBreakdown | None, list[str]]:
    groups, notes = run_groups(spec, results, steps, strict)
    if not groups:
        return None, notes
    return build_run(spec.world_size, groups, spec.paths, notes), []


@dataclasses.dataclass(frozen=True)
class ReplayOptions:
    """What the replay stage needs beyond the runs: the rules, the topology the user states."""

    rules: str | None = None
    memory_budget: int = DEFAULT_MEMORY_BUDGET
    gpus_per_node: int | None = None
    inter_node_bandwidth: float | None = None
    inter_node_latency: float | None = None
    #: The per-rank results' cache also holds the representative ranks' graphs, so a cached
    #: analyze reads no trace; ``cache_dir`` None is the default directory.
    use_cache: bool = False
    cache_dir: str | None = None
    #: Where a rank's events come from when no file holds them (``from_hta``'s loaded
    #: frames): the rank result's key -> its trace. None: the replay reads the trace file.
    loader: Callable[[str], RankTrace] | None = None


def _replay(
    spec: StudySpec,
    results: dict[str, RankResult | TaskError],
    runs: list[RunBreakdown],
    run_dicts: list[dict[str, Any]],
    sdict: dict[str, Any],
    opts: ReplayOptions,
    steps: slice | None,
) -> list[str]:
    """replay_error per run, and projections through the replay of the largest run."""
    from tracescale.findings.levers import op_candidates
    from tracescale.replay.apply import apply_replay
    from tracescale.replay.engine.run import replay_run, representative_rank
    from tracescale.replay.fit import fit_replay
    from tracescale.replay.links.mesh import meshes_into_runs
    from tracescale.replay.links.tiers import default_gpus_per_node
    from tracescale.replay.whatif.levers import op_group

    rules = load_rules(opts.rules)
    ops = [op_group(cat, str(e["name"])) for cat, e in op_candidates(run_dicts[-1])]
    by_rank: dict[tuple[int, int], str] = {}
    et_of: dict[str, str] = {}
    for run_spec in spec.runs:
        for f in (f for g in run_spec.groups for f in g.files):
            et_of[f.path] = f.execution_trace
            res = results.get(f.path)
            if isinstance(res, RankResult):
                by_rank.setdefault((run_spec.world_size, res.rank), f.path)
    replays = []
    notes: list[str] = []
    for run, rd in zip(runs, run_dicts, strict=True):
        rank = representative_rank(run)
        path = by_rank.get((run.world_size, rank))
        if path is None:
            continue
        res = results.get(path)
        own = table_of(select_steps(res, steps), "steps") if isinstance(res, RankResult) else None
        try:
            rr = replay_run(
                run,
                path,
                rank,
                rules,
                memory_budget=opts.memory_budget,
                steps=steps,
                cache_dir=opts.cache_dir,
                use_cache=opts.use_cache,
                own_steps=own,  # pooled repeats: the run's rows of this rank span several files
                loader=opts.loader,
                execution_trace=et_of.get(path, ""),
            )
        except TracescaleError as exc:
            notes.append(f"replay of N={run.world_size} unavailable: {exc.message}")
            continue
        rd["replay_error"] = rr.replay_error
        rd["replay_rank"] = rank
        replays.append(rr)
    # A GPU study replays its GPU runs; a CPU-only (gloo) one its CPU runs, whose host-side
    # collectives are graph nodes with the same alpha-beta laws.
    usable = [r for r in replays if r.kind == "gpu"] or replays
    if len(usable) >= 2 and usable[-1].world_size == runs[-1].world_size:
        gpn = opts.gpus_per_node or default_gpus_per_node(usable, [p for p in runs[-1].paths])
        study = fit_replay(
            usable,
            gpus_per_node=gpn,
            inter_bandwidth=opts.inter_node_bandwidth,
            inter_latency=opts.inter_node_latency,
        )
        stated = dict(sdict.get("assumptions") or {})
        study, applied, not_applied = assumed_laws(study, str(sdict["mode"]), stated)
        notes.extend(not_applied)
        notes.extend(apply_replay(sdict, study, ops=ops))
        sdict["replay"]["assumptions"].extend(applied)
        meshes_into_runs(run_dicts, sdict)
        sdict["warnings"] = list(dict.fromkeys([*sdict.get("warnings", []), *notes]))
    elif len(runs) == 1 and len(usable) == 1:  # one run: the laws are the stated assumptions
        from tracescale.replay.laws.assumed import assumed_study

        study = fit_replay(usable, gpus_per_node=opts.gpus_per_node, validate=False)
        study = assumed_study(study, str(sdict["mode"]), dict(sdict.get("assumptions") or {}))
        notes.extend(apply_replay(sdict, study, ops=ops))
        meshes_into_runs(run_dicts, sdict)
        sdict["warnings"] = list(dict.fromkeys([*sdict.get("warnings", []), *notes]))
    else:
        _mark_closed_form(sdict, NO_REPLAY)
    return notes


NO_REPLAY = "no replay of the largest run and another"


def _mark_closed_form(sdict: dict[str, Any], why: str) -> None:
    """Say in the scaling document (and each what-if) that its projections are the closed
    form's, and why."""
    sdict["projections_source"] = "closed_form"
    sdict["projections_source_reason"] = why
    for entry in sdict.get("what_if", []):
        entry.setdefault("projections_source", "closed_form")
        entry.setdefault("projections_source_reason", why)


def analyze_study(
    spec: StudySpec,
    results: dict[str, RankResult | TaskError],
    *,
    mode: str,
    project: Sequence[int] | None,
    what_if: Mapping[str, float] | None,
    assumptions: Mapping[str, str] | None,
    steps: slice | None,
    strict: bool,
    replay: ReplayOptions | None = None,
) -> tuple[dict[str, Any], tuple[RunBreakdown, ...], Any]:
    """One study's document entry (runs, scaling, warnings, findings)."""
    from tracescale.classify.top_ops import attach_laws
    from tracescale.findings import top_findings

    warnings = list(spec.warnings)
    runs: list[RunBreakdown] = []
    for run_spec in spec.runs:
        run, notes = _run_breakdown(run_spec, results, steps, strict)
        warnings.extend(notes)
        if run is not None:
            runs.append(run)
    if not runs:
        skipped = [w for w in warnings if ": skipped: " in w]
        why = f" ({len(skipped)} skipped; first: {skipped[0]})" if skipped else ""
        raise InvalidTraceError(f"no analyzable trace files{why}", path=spec.path)
    different = check_same_job(study_signatures(spec, results))
    if different and strict:
        raise InvalidTraceError(f"{different[0]} (--strict)", path=spec.path)
    warnings.extend(different)

    def closed_form(intervals: bool) -> ScalingResult:
        return analyze_scaling(
            runs,
            mode=mode,
            project=project,
            what_if=what_if,
            assumptions=assumptions,
            closed_form_intervals=intervals,
        )

    # With a replay the intervals are the replay's: the closed form's bootstrap runs only
    # where its intervals are printed (weak scaling's share, or no replay after all).
    scaling = closed_form(replay is None)
    sdict = scaling.to_dict()
    run_dicts = [run_to_dict(r, rows=False) for r in runs]
    attach_laws(run_dicts, scaling.mode)  # before the replay: it replays the flagged top ops
    if replay is not None:
        warnings.extend(_replay(spec, results, runs, run_dicts, sdict, replay, steps))
        if sdict.get("projections_source") != "replay" and scaling.n_boot == 0:
            scaling = closed_form(True)
            sdict = scaling.to_dict()
            _mark_closed_form(sdict, NO_REPLAY)
        scaling = synced_with(scaling, sdict)
    for run, rd in zip(runs, run_dicts, strict=True):  # after the replay: not both at its peak
        rd["step_rows"] = step_rows(run)
    entry: dict[str, Any] = {
        "path": spec.path,
        "mode": scaling.mode,
        "mode_reason": scaling.mode_reason,
        "categories": list(CATEGORIES),
        "runs": run_dicts,
        "scaling": sdict,
        "requested_world_sizes": sorted({int(n) for n in project}) if project else None,
        "warnings": list(
            dict.fromkeys(
                warnings + [w for r in runs for w in r.warnings] + list(sdict.get("warnings", []))
            )
        ),
    }
    entry["findings"] = top_findings(entry)
    return entry, tuple(runs), scaling


def map_ranks(
    specs: Sequence[StudySpec],
    *,
    path: str,
    rules: str | None = None,
    jobs: int | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    progress: Callable[[RankTask], None] | None = None,
    show_progress: bool = False,
    **parallel_options: Any,
) -> tuple[dict[str, RankResult | TaskError], tuple[str, ...]]:
    """The map step: every rank file of ``specs`` classified (or its error), by file path,
    and the warnings of the map (cache, workers). Raises :class:`NoTracesError` when empty."""
    tasks = [
        RankTask(path=f.path, rank=f.rank, rules_file=rules, memory_budget=memory_budget)
        for spec in specs
        for run in spec.runs
        for g in run.groups
        for f in g.files
    ]
    if not tasks:
        raise NoTracesError("no trace files found", path=path)
    if show_progress and progress is None:
        from tracescale.parallel.progress import progress_bar

        with progress_bar(tasks, True) as bar:
            mapped = run_tasks(tasks, jobs=jobs, progress=bar, **parallel_options)
    else:
        mapped = run_tasks(tasks, jobs=jobs, progress=progress, **parallel_options)
    results = {t.path: r for t, r in zip(tasks, mapped.results, strict=False)}
    return results, tuple(mapped.warnings)


def analyze(
    path: str,
    *,
    mode: str = "auto",
    project: Sequence[int] | None = None,
    what_if: Mapping[str, float] | None = None,
    rules: str | None = None,
    steps: str | slice | None = None,
    jobs: int | None = None,
    assumptions: Mapping[str, str] | None = None,
    strict: bool = False,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    gpus_per_node: int | None = None,
    inter_node_bandwidth: float | None = None,
    inter_node_latency: float | None = None,
    replay: bool = True,
    progress: Callable[[RankTask], None] | None = None,
    show_progress: bool = False,
    use_study_cache: bool = True,
    prepared: Prepared | None = None,
    **parallel_options: Any,
) -> Study:
    """Analyze every study under ``path`` (see the README's layouts) into a :class:`Study`.

    With the cache on, a document whose every input is unchanged comes from the study-level
    cache (its typed parts are recomputed on first use); ``use_study_cache=False`` skips that
    level only. ``prepared`` is :func:`tracescale.preflight.prepare`'s answer when the caller
    already asked it (the API does, to avoid loading this module on a hit).
    """
    options: dict[str, Any] = {
        "mode": mode,
        "project": project,
        "what_if": what_if,
        "rules": rules,
        "steps": steps,
        "assumptions": assumptions,
        "strict": strict,
        "memory_budget": memory_budget,
        "gpus_per_node": gpus_per_node,
        "inter_node_bandwidth": inter_node_bandwidth,
        "inter_node_latency": inter_node_latency,
        "replay": replay,
    }
    if prepared is None:
        prepared = prepare(
            path,
            progress=progress,
            parallel_options=parallel_options,
            study_cache=use_study_cache,
            **options,
        )
    if prepared.doc is not None:
        recompute = functools.partial(typed_parts, path, jobs=jobs, **options, **parallel_options)
        return Study(prepared.doc, recompute=recompute)
    specs, step_slice = prepared.specs, prepared.steps
    results, map_warnings = map_ranks(
        specs,
        path=path,
        rules=rules,
        jobs=jobs,
        memory_budget=memory_budget,
        progress=progress,
        show_progress=show_progress,
        **parallel_options,
    )
    replay_opts = (
        ReplayOptions(
            rules,
            memory_budget,
            gpus_per_node,
            inter_node_bandwidth,
            inter_node_latency,
            use_cache=not parallel_options.get("no_cache", False),
            cache_dir=parallel_options.get("cache_dir"),
        )
        if replay
        else None
    )
    entries, runs_all, scalings = [], [], []
    try:
        for spec in specs:
            entry, runs, scaling = analyze_study(
                spec,
                results,
                mode=mode,
                project=project,
                what_if=what_if,
                assumptions=assumptions,
                steps=step_slice,
                strict=strict,
                replay=replay_opts,
            )
            entry["warnings"] = list(dict.fromkeys([*entry["warnings"], *map_warnings]))
            entries.append(entry)
            runs_all.append(runs)
            scalings.append(scaling)
    finally:
        last_read.forget()  # the map step's last trace, where no replay took it
    doc = make_document(entries)
    if all(isinstance(r, RankResult) for r in results.values()) and not map_warnings:
        store_document(prepared, doc)
    return Study(doc=doc, runs_by_study=tuple(runs_all), scaling_by_study=tuple(scalings))


def typed_parts(path: str, **options: Any) -> TypedParts:
    """The typed run breakdowns and scaling results of ``analyze(path, **options)``, computed
    without the study-level cache (a cached Study's ``recompute``)."""
    study = analyze(path, use_study_cache=False, **options)
    return study.runs_by_study, study.scaling_by_study
