"""Loaded HTA traces -> a tracescale Study, through the same classify and scaling as ``analyze``."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from tracescale.classify.rank import RankResult, classify_rank
from tracescale.classify.rules import load_rules
from tracescale.errors import InvalidTraceError, NoTracesError, TracescaleError, UsageError
from tracescale.hta_interop.convert import HTA_HINT, hta_trace_to_rank_trace, trace_of
from tracescale.ingest.discover import RankFile, RunGroup, RunSpec, StudySpec, pool_repeats
from tracescale.parallel.tasks import TaskError
from tracescale.study import Study, make_document


def _run_spec(
    t: Any, ranks: list[int], keys: dict[int, str], world: int | None, label: str
) -> RunSpec:
    """World size as discovery decides it: distributedInfo, else the given one, else the ranks."""
    warnings: list[str] = []
    if world is None:
        sizes = set()
        for r in ranks:
            dist = ((getattr(t, "meta_data", None) or {}).get(r) or {}).get("distributedInfo")
            ws = (dist or {}).get("world_size")
            if isinstance(ws, int) and ws > 0:
                sizes.add(ws)
        if len(sizes) > 1:
            raise InvalidTraceError(
                f"ranks of one HTA trace report different world sizes {sorted(sizes)}", path=label
            )
        world = sizes.pop() if sizes else max(len(ranks), max(ranks) + 1)
    bad = [r for r in ranks if r >= world]
    if bad:
        raise InvalidTraceError(f"rank {bad[0]} is not below the world size {world}", path=label)
    missing = sorted(set(range(world)) - set(ranks))
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        warnings.append(f"{label}: {len(ranks)} of {world} ranks present; missing ranks {shown}")
    files = tuple(RankFile(keys[r], r, 0, "HTA") for r in ranks)
    return RunSpec(
        world_size=world,
        label=label,
        groups=(RunGroup(folder=label, files=files),),
        warnings=tuple(warnings),
    )


def from_hta(
    *analyses: Any,
    world_sizes: Sequence[int | None] | None = None,
    mode: str = "auto",
    project: Sequence[int] | None = None,
    what_if: Mapping[str, float] | None = None,
    assumptions: Mapping[str, str] | None = None,
    rules: str | None = None,
    steps: str | slice | None = None,
    strict: bool = False,
) -> Study:
    """A :class:`Study` from already loaded ``hta.trace_analysis.TraceAnalysis`` objects.

    One run per object; pass several for several world sizes (objects of the same world size
    are pooled as repeats, like run folders)::

        from hta.trace_analysis import TraceAnalysis
        runs = [TraceAnalysis(trace_dir=f"traces/ws{n}") for n in (1, 2, 4, 8)]
        study = tracescale.from_hta(*runs)
        study.scaling.serial_fraction

    ``world_sizes`` overrides the world size per object (default: ``distributedInfo``, else the
    number of ranks). The other options are :func:`tracescale.analyze`'s. HTA's loader drops the
    last ProfilerStep unless it was built with ``include_last_profiler_step=True``.
    """
    from tracescale.pipeline import ReplayOptions, analyze_study, parse_steps

    if not analyses:
        raise UsageError(f"from_hta needs at least one loaded trace; {HTA_HINT}")
    if mode not in ("auto", "strong", "weak"):
        raise UsageError(f"--mode must be auto, strong or weak, not {mode!r}")
    if world_sizes is not None and len(world_sizes) != len(analyses):
        raise UsageError(
            f"world_sizes has {len(world_sizes)} entries for {len(analyses)} HTA traces"
        )
    rule_set = load_rules(rules)
    step_slice = parse_steps(steps) if isinstance(steps, str) or steps is None else steps
    results: dict[str, RankResult | TaskError] = {}
    sources: dict[str, tuple[Any, int]] = {}  # result key -> (HTA object, rank): the replay's
    by_ws: dict[int, list[RunSpec]] = {}
    folders: list[str] = []
    for i, analysis in enumerate(analyses):
        t = trace_of(analysis)
        ranks = sorted(int(r) for r in t.get_ranks())
        folder = str(getattr(t, "trace_path", "") or f"<hta trace {i}>")
        folders.append(folder)
        if not ranks:
            raise NoTracesError("HTA trace has no ranks with analyzable events", path=folder)
        keys: dict[int, str] = {}
        for r in ranks:
            key = str((getattr(t, "trace_files", None) or {}).get(r, f"{folder}#rank{r}"))
            while key in results:
                key += f"#{i}"
            keys[r] = key
            sources[key] = (analysis, r)
            try:
                results[key] = classify_rank(hta_trace_to_rank_trace(t, r), rule_set, rank=r)
            except TracescaleError as exc:
                results[key] = TaskError(key, exc.message, exc.exit_code)
        ws_given = world_sizes[i] if world_sizes is not None else None
        run = _run_spec(t, ranks, keys, ws_given, folder)
        by_ws.setdefault(run.world_size, []).append(run)
    runs = [pool_repeats(ws, by_ws[ws], "HTA traces") for ws in sorted(by_ws)]
    study_path = (
        os.path.commonpath(folders) if all(os.path.isabs(f) for f in folders) else folders[0]
    )
    spec = StudySpec(path=study_path, runs=tuple(runs))
    entry, run_breakdowns, scaling = analyze_study(
        spec,
        results,
        mode=mode,
        project=project,
        what_if=what_if,
        assumptions=assumptions,
        steps=step_slice,
        strict=strict,
        # the replay rebuilds each representative rank from HTA's frames (they hold every event)
        replay=ReplayOptions(rules, loader=lambda key: hta_trace_to_rank_trace(*sources[key])),
    )
    return Study(
        doc=make_document([entry]),
        runs_by_study=(run_breakdowns,),
        scaling_by_study=(scaling,),
    )
