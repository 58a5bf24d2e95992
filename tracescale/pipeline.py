"""ingest -> classify -> scale, end to end: the function behind ``tracescale analyze``.

Discovery reads only file heads; per-rank work runs through :mod:`tracescale.parallel`;
this module merges the compact results per run, scales each study and builds the document.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tracescale.categories import CATEGORIES
from tracescale.classify.rank import RankResult
from tracescale.classify.result import RunBreakdown
from tracescale.classify.rules import load_rules
from tracescale.classify.run import build_run
from tracescale.classify.same_job import check_same_job, study_signatures
from tracescale.errors import InvalidTraceError, NoTracesError, TracescaleError, UsageError
from tracescale.ingest.decode import DEFAULT_MEMORY_BUDGET
from tracescale.ingest.discover import RunSpec, StudySpec, discover
from tracescale.ingest.group import pooled_windows_note
from tracescale.parallel import RankTask, TaskError, run_tasks
from tracescale.scaling import analyze_scaling
from tracescale.scaling.result import synced_with
from tracescale.study import Study, make_document, run_to_dict

_STEPS_HELP = (
    "--steps takes ProfilerStep numbers as inspect shows them: 12: or #12: (from #12 on), "
    "10:14 (#10 to #13), #12 (that step alone); negative numbers count from the last step "
    "(:-1 drops the last)"
)


def _step_bound(text: str, spec: str) -> int | None:
    text = text.strip().removeprefix("#")
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{_STEPS_HELP}; got {spec!r}") from None


def parse_steps(spec: str | None) -> slice | None:
    """``"12:"``/``"#12:"`` -> slice(12, None) of ProfilerStep numbers; ``"#12"`` -> that step.

    Bounds are step numbers (half-open, like a slice), not positions: a trace whose steps are
    #10..#14 keeps #12..#14 with ``12:``. Negative bounds count from each rank's last step. A
    bare number (``2``) is rejected: it could mean step #2 or the first two steps.
    """
    if spec is None or spec.strip() == "":
        return None
    spec = spec.strip()
    parts = spec.split(":")
    if len(parts) == 1:
        if not spec.startswith("#"):
            raise UsageError(
                f"--steps {spec} is ambiguous: write #{spec} for ProfilerStep#{spec} alone, "
                f"{spec}: for #{spec} onwards, or :{spec} for the steps before #{spec}"
            )
        n = _step_bound(spec, spec)
        if n is None or n < 0:
            raise UsageError(f"{_STEPS_HELP}; got {spec!r}")
        return slice(n, n + 1)
    if len(parts) != 2:
        raise UsageError(f"{_STEPS_HELP}; got {spec!r}")
    return slice(_step_bound(parts[0], spec), _step_bound(parts[1], spec))


def _select_steps(result: RankResult, steps: slice | None) -> RankResult:
    """Keep the steps whose ProfilerStep number lies in ``steps`` (negatives: from the end)."""
    if steps is None:
        return result
    numbers = result.steps["step"].to_numpy()
    position = np.arange(len(numbers))
    keep = np.ones(len(numbers), dtype=bool)
    if steps.start is not None:
        start = int(steps.start)
        keep &= (numbers >= start) if start >= 0 else (position >= len(numbers) + start)
    if steps.stop is not None:
        stop = int(steps.stop)
        keep &= (numbers < stop) if stop >= 0 else (position < len(numbers) + stop)
    kept = result.steps[keep].reset_index(drop=True)
    if kept.empty:
        have = f"#{numbers.min()}–#{numbers.max()}" if len(numbers) else "no ProfilerStep"
        raise UsageError(
            f"--steps {_slice_text(steps)} keeps none of this rank's steps ({have}); "
            "numbers are ProfilerStep numbers, as inspect shows them",
            path=result.path,
        )
    keep_numbers = set(kept["step"].tolist())
    coll = result.collectives[result.collectives["step"].isin(keep_numbers)]
    ops = result.op_seconds
    if len(ops):
        ops = ops[ops["step"].isin(keep_numbers)].reset_index(drop=True)
    return dataclasses.replace(
        result, steps=kept, collectives=coll.reset_index(drop=True), op_seconds=ops
    )


def _slice_text(steps: slice) -> str:
    start = "" if steps.start is None else str(steps.start)
    stop = "" if steps.stop is None else str(steps.stop)
    return f"{start}:{stop}"


def _check_duplicate_ranks(results: list[RankResult], notes: list[str]) -> list[RankResult]:
    """One rank twice in a folder: successive profiling windows are pooled (with a note naming
    every file and the gap), overlaps are errors."""
    by_rank: dict[int, list[RankResult]] = {}
    for r in results:
        by_rank.setdefault(r.rank, []).append(r)
    out: list[RankResult] = []
    for rank, rs in sorted(by_rank.items()):
        if len(rs) == 1:
            out.append(rs[0])
            continue
        spans = sorted(
            (
                r.segments.first,
                r.segments.stop,
                r.path,
            )
            for r in rs
        )
        for (_s0, e0, p0), (s1, _e1, p1) in itertools.pairwise(spans):
            if s1 < e0:
                raise InvalidTraceError(
                    f"rank {rank} appears twice with overlapping time spans: {p0} and {p1}",
                    path=os.path.dirname(p0),
                )
        # Successive windows of one process (tb_plugin's worker0.<span> files): pool the steps.
        notes.append(pooled_windows_note(rank, [(p, s, e) for s, e, p in spans]))
        out.extend(rs)
    return out


def run_groups(
    spec: RunSpec,
    results: Mapping[str, RankResult | TaskError],
    steps: slice | None = None,
    strict: bool = False,
) -> tuple[list[list[RankResult]], list[str]]:
    """The map results of one run as its executions (groups whose collectives match), plus
    notes on the files skipped; ``strict`` makes a bad file an error instead."""
    notes = list(spec.warnings)
    groups: list[list[RankResult]] = []
    for group in spec.groups:
        ok: list[RankResult] = []
        for f in group.files:
            res = results[f.path]
            if isinstance(res, TaskError):
                if strict:
                    raise InvalidTraceError(res.message, path=res.path)
                notes.append(f"{res.path}: skipped: {res.message}")
                continue
            ok.append(_select_steps(res, steps))
        if ok:
            groups.extend(_split_successive(_check_duplicate_ranks(ok, notes)))
    return groups, notes


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


def fail_on_rejected(specs: Sequence[StudySpec]) -> None:
    """--strict: a file left out at discovery fails the run before any work starts."""
    rejected = [r for spec in specs for r in spec.rejected]
    if rejected:
        path, why = rejected[0]
        more = f"; {len(rejected)} files rejected" if len(rejected) > 1 else ""
        raise InvalidTraceError(f"{why} (--strict{more})", path=path)


def _split_successive(results: list[RankResult]) -> list[list[RankResult]]:
    """Pooled successive windows of the same rank become separate groups (matched separately)."""
    groups: list[list[RankResult]] = []
    for r in results:
        for g in groups:
            if all(x.rank != r.rank for x in g):
                g.append(r)
                break
        else:
            groups.append([r])
    return groups


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
    from tracescale.replay.apply import apply_replay, default_gpus_per_node
    from tracescale.replay.project import fit_replay
    from tracescale.replay.run import replay_run, representative_rank

    rules = load_rules(opts.rules)
    by_rank: dict[tuple[int, int], str] = {}
    for run_spec in spec.runs:
        for f in (f for g in run_spec.groups for f in g.files):
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
            )
        except TracescaleError as exc:
            notes.append(f"replay of N={run.world_size} unavailable: {exc.message}")
            continue
        rd["replay_error"] = rr.replay_error
        rd["replay_rank"] = rank
        replays.append(rr)
    usable = [r for r in replays if r.kind == "gpu"]
    if len(usable) >= 2 and usable[-1].world_size == runs[-1].world_size:
        gpn = opts.gpus_per_node or default_gpus_per_node(usable, [p for p in runs[-1].paths])
        study = fit_replay(
            usable,
            gpus_per_node=gpn,
            inter_bandwidth=opts.inter_node_bandwidth,
            inter_latency=opts.inter_node_latency,
        )
        notes.extend(apply_replay(sdict, study))
        sdict["warnings"] = list(dict.fromkeys([*sdict.get("warnings", []), *notes]))
    return notes


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
    scaling = analyze_scaling(
        runs, mode=mode, project=project, what_if=what_if, assumptions=assumptions
    )
    sdict = scaling.to_dict()
    run_dicts = [run_to_dict(r) for r in runs]
    if replay is not None:
        warnings.extend(_replay(spec, results, runs, run_dicts, sdict, replay, steps))
        scaling = synced_with(scaling, sdict)
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
    attach_laws(entry["runs"], scaling.mode)
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
    **parallel_options: Any,
) -> Study:
    """Analyze every study under ``path`` (see the README's layouts) into a :class:`Study`."""
    if mode not in ("auto", "strong", "weak"):
        raise UsageError(f"--mode must be auto, strong or weak, not {mode!r}")
    load_rules(rules)  # fail fast on a bad rules file, before any worker starts
    step_slice = parse_steps(steps) if isinstance(steps, str) or steps is None else steps
    specs = discover(path)
    if strict:
        fail_on_rejected(specs)
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
    return Study(
        doc=make_document(entries), runs_by_study=tuple(runs_all), scaling_by_study=tuple(scalings)
    )
