"""``tracescale inspect PATH``: what is in the traces, before any analysis.

Per study, run and rank: file, size, events, traced span, steps, GPUs and streams, collectives,
rank/world size and warnings. A bad rank file in a multi-file run is a warning row (exit 0)
unless ``--strict`` (exit 3): the user sees everything that is fine plus what is not.
Where ``ProfilerStep`` is not the marker, one line per candidate step marker says how often it
repeats and which was chosen; a PyTorch execution trace beside the rank files is listed with
the rank file it pairs with.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import click
import numpy as np

from tracescale.classify.collectives import collective_type
from tracescale.classify.rules import DEVICE_TARGETS, RuleSet, classify_events, load_rules
from tracescale.cli.options import memory_budget_option
from tracescale.cli.pipeline_chunks import run_chunks, trace_chunks
from tracescale.cli.settings import CONTEXT
from tracescale.cli.trace_table import render_table
from tracescale.errors import InvalidTraceError
from tracescale.ingest.decode import DEFAULT_MEMORY_BUDGET
from tracescale.ingest.discover import RankFile, RunSpec, StudySpec, discover
from tracescale.ingest.group import load_group, pooled_windows_note
from tracescale.ingest.groups import group_table
from tracescale.ingest.sniff import ET_NOTE
from tracescale.ingest.steps import find_steps
from tracescale.ingest.trace import RankTrace

_COMM = DEVICE_TARGETS.index("communication")


def collective_kind(text: str) -> str:
    """Normalized collective type of a kernel/op name or ``Collective name``."""
    return collective_type(text)


def _count(trace: RankTrace, idx: np.ndarray[Any, Any]) -> dict[str, int]:
    ev, strings = trace.events, trace.strings
    counts: dict[str, int] = {}
    for name_id, coll_id in zip(ev.name[idx].tolist(), ev.coll_name[idx].tolist(), strict=True):
        kind = collective_kind(strings[coll_id] if coll_id >= 0 else strings[name_id])
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))


def collectives(trace: RankTrace, rules: RuleSet | None = None) -> dict[str, Any]:
    """Device collective kernels by type, and host collective ops by type.

    Kernels are those the device rules call ``communication`` (the communication-kernel
    families of ``classify/comm_kernels.py`` plus any ``--rules``), the same test classify uses;
    ``gpu_user_annotation`` ranges such as ``nccl:all_reduce`` are not kernels and never count.
    Host ops come from one source only, the first present of ``nccl:*``/``gloo:*``
    annotations and ``c10d::*`` ops, so one collective is not counted twice (c10d enqueues,
    then the backend annotates). Sampled traces may hold the host op but not its kernel.
    """
    ev = trace.events
    out: dict[str, Any] = {"kernels": {}, "host": {}, "host_source": ""}
    if len(ev) == 0:
        return out
    rule_set = rules if rules is not None else load_rules()
    dev_t = classify_events(
        rule_set.device,
        DEVICE_TARGETS,
        trace.strings,
        ev.name,
        ev.cat,
        step_names=trace.step_names,
    )
    out["kernels"] = _count(trace, np.flatnonzero(ev.is_device & (dev_t == _COMM)))
    host = ~ev.is_device
    for source, prefixes in (("nccl:*/gloo:*", ("nccl:", "gloo:")), ("c10d::*", ("c10d::",))):
        mask = trace.string_mask(_starts_with(prefixes))
        idx = np.flatnonzero(host & mask[ev.name])
        if len(idx):
            out["host"], out["host_source"] = _count(trace, idx), source
            break
    return out


def rank_summary(
    trace: RankTrace,
    rf: RankFile,
    world_size: int,
    rules: RuleSet | None = None,
    files: list[str] | None = None,
) -> dict[str, Any]:
    """The inspect row of one rank (seconds, plain JSON types); ``files``: pooled windows."""
    ev = trace.events
    steps = find_steps(trace, rules.step_marker if rules is not None else None)
    lo, hi = trace.span_ns
    dev = ev.is_device
    gpu = np.where(ev.device[dev] >= 0, ev.device[dev], ev.pid[dev])  # old traces: pid = GPU
    stream = np.where(ev.stream[dev] >= 0, ev.stream[dev], ev.tid[dev])
    warnings = [f"{n} {what} skipped" for what, n in trace.meta.skipped.items()]
    warnings.extend(steps.warnings)
    if rf.rank_from == "order":
        warnings.append(f"no rank in the file: taken as rank {rf.rank} by order")
    durations = (steps.end - steps.start) / 1e9
    return {
        "file": trace.meta.path,
        "files": files or [trace.meta.path],
        "size_bytes": trace.meta.size_bytes,
        "rank": rf.rank,
        "rank_from": rf.rank_from,
        "world_size": trace.meta.world_size or world_size,
        "events": len(ev),
        "span_s": (hi - lo) / 1e9,
        "steps": {
            "count": 0 if steps.synthetic else len(steps),
            "numbers": [] if steps.synthetic else steps.numbers.tolist(),
            "mean_s": float(durations.mean()) if len(steps) and not steps.synthetic else None,
            "marker": steps.marker,
            "candidates": [
                {"marker": k, "count": n, "why": why, "chosen": k == steps.marker}
                for k, n, why in steps.candidates
            ],
        },
        "gpus": sorted(set(gpu.tolist())),
        "streams": len(set(zip(gpu.tolist(), stream.tolist(), strict=True))),
        "collectives": collectives(trace, rules),
        "warnings": warnings,
        "error": None,
    }


def _error_row(rf: RankFile, exc: InvalidTraceError) -> dict[str, Any]:
    return {"file": rf.path, "size_bytes": rf.size, "rank": rf.rank, "error": exc.message}


def group_rows(trace: RankTrace, world_size: int) -> list[tuple[int, str, int, str]]:
    """(world size, group key, group size, collective type) of every distinct process group
    use of the trace: the rows the size laws and the mesh read (``replay.links.mesh``)."""
    ev, strings = trace.events, trace.strings
    table = group_table(trace)
    idx = np.flatnonzero(table.of_event >= 0)
    if not len(idx):
        return []
    pairs = np.unique(np.stack([table.of_event[idx], ev.coll_name[idx], ev.name[idx]], 1), axis=0)
    out = set()
    for gid, coll_id, name_id in pairs.tolist():
        g = table.groups[gid]
        size = g.size if g.size > 0 else world_size
        out.add(
            (
                world_size,
                g.key,
                size,
                collective_type(strings[coll_id if coll_id >= 0 else name_id]),
            )
        )
    return sorted(out)


def run_summary(
    run: RunSpec,
    memory_budget: int,
    rules: RuleSet | None = None,
    groups: list[tuple[int, str, int, str]] | None = None,
    chunks: list[tuple[int, int | None]] | None = None,
) -> dict[str, Any]:
    """Rows of every rank file of a run, bad files as error rows (``groups``: gets each rank's
    :func:`group_rows`; ``chunks``: each pipeline rank's model chunks reading)."""
    rows: list[dict[str, Any]] = []
    for group in run.groups:
        errors: dict[str, dict[str, Any]] = {}
        pooled: dict[int, list[RankTrace]] = {}

        def on_error(rf: RankFile, exc: InvalidTraceError, errors: Any = errors) -> None:
            errors[rf.path] = _error_row(rf, exc)

        def on_merge(rank: int, windows: list[RankTrace], pooled: Any = pooled) -> None:
            pooled[rank] = windows

        traces = load_group(
            group, memory_budget=memory_budget, on_error=on_error, on_merge=on_merge
        )
        by_path = {f.path: f for f in group.files}
        for trace in traces:  # a merged trace keeps its first window's path
            rf = by_path[trace.meta.path]
            windows = pooled.get(rf.rank, [])
            files = [w.meta.path for w in windows] or None
            row = rank_summary(trace, rf, run.world_size, rules, files)
            row["devices"] = len(trace.meta.device_names)
            if rf.execution_trace:  # paired, dependencies read (discovery's note says so)
                row["execution_trace"] = {"file": rf.execution_trace, "deps": rf.et_dependencies}
            if groups is not None:
                groups.extend(group_rows(trace, run.world_size))
            if chunks is not None and (got := trace_chunks(trace))[0]:
                chunks.append((run.world_size, got[1]))
            if windows:
                row["warnings"].insert(0, pooled_windows_note(rf.rank, windows))
            rows.append(row)
        rows.extend(errors.values())
    rows.sort(key=lambda r: (r["rank"], r["file"]))
    return {
        "world_size": run.world_size,
        "label": run.label,
        "folders": [g.folder for g in run.groups],
        "ranks": rows,
        "warnings": list(run.warnings),
    }


def inspect_path(
    path: str, memory_budget: int = DEFAULT_MEMORY_BUDGET, rules: str | None = None
) -> list[dict[str, Any]]:
    """The inspect document: one dict per study (the ``--format json`` output)."""
    rule_set = load_rules(rules)
    out = []
    for study in discover(path):
        out.append(_study_summary(study, memory_budget, rule_set))
    return out


def _study_summary(study: StudySpec, memory_budget: int, rules: RuleSet) -> dict[str, Any]:
    groups: list[tuple[int, str, int, str]] = []
    chunks: list[tuple[int, int | None]] = []
    runs = [run_summary(r, memory_budget, rules, groups, chunks) for r in study.runs]
    mesh = _mesh(groups, runs, chunks)
    for run in runs:
        run["mesh"] = mesh["runs"].get(str(run["world_size"]), [])
    companion = [w for w in study.warnings if _is_companion(w)]
    return {
        "path": study.path,
        "runs": runs,
        "mesh_warnings": mesh["warnings"],
        "execution_traces": companion,
        "warnings": [w for w in study.warnings if not _is_companion(w)],
    }


def _mesh(
    groups: list[tuple[int, str, int, str]],
    runs: list[dict[str, Any]],
    chunks: Sequence[tuple[int, int | None]] = (),
) -> dict[str, Any]:
    """Each run's parallelism mesh from its ranks' process groups, read as the replay reads the
    collectives it fits on (``replay.links.mesh``), GPUs per node as the replay takes them; a
    pipeline's model chunks per rank from its ranks' readings (``cli.pipeline_chunks``)."""
    import pandas as pd

    from tracescale.replay.links.mesh import mesh_dict, run_meshes
    from tracescale.replay.links.tiers import gpus_per_node_of
    from tracescale.replay.links.topology import group_roles

    frame = pd.DataFrame(groups, columns=["world_size", "pg", "group", "collective"])
    p2p = (frame["collective"] == "sendrecv") & (frame["group"] <= 2)
    pipeline: dict[int, list[str]] = {int(r["world_size"]): [] for r in runs}
    for n, pg in zip(frame["world_size"][p2p], frame["pg"][p2p], strict=True):
        pipeline[int(n)].append(str(pg))
    inst = frame[~p2p]
    top = max(runs, key=lambda r: int(r["world_size"]), default=None)
    ranks = [r for r in (top or {}).get("ranks", []) if not r.get("error")]
    gpn = gpus_per_node_of(
        max((int(r.get("devices", 0)) for r in ranks), default=0), [r["file"] for r in ranks]
    )
    virtual = {n: run_chunks([v for m, v in chunks if m == n]) for n in {m for m, _ in chunks}}
    return mesh_dict(run_meshes(inst, group_roles(inst, gpn), pipeline, gpn, virtual))


def _is_companion(note: str) -> bool:
    """A discovery note about a PyTorch execution trace (``path: PyTorch execution trace ...``)."""
    return f": {ET_NOTE} (" in note


def _bad_files(doc: list[dict[str, Any]]) -> list[str]:
    bad = [
        f"{r['file']}: {r['error']}"
        for s in doc
        for run in s["runs"]
        for r in run["ranks"]
        if r.get("error")
    ]
    bad.extend(w for s in doc for w in s["warnings"] if ": skipped: " in w)
    return bad


@click.command(
    epilog="Exit codes: 0 ok; 2 usage; 3 invalid trace data (--strict); 4 no traces.",
    context_settings=CONTEXT,
)
@click.argument("path", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table")
@click.option("--strict", is_flag=True, help="Exit 3 when any rank file is bad.")
@click.option(
    "--rules",
    type=click.Path(),
    default=None,
    help="TOML file of name rules applied before the defaults (which kernels are collectives).",
)
@click.option(
    "--step-marker",
    metavar="REGEX",
    default=None,
    help="Name of the event that marks a step where ProfilerStep is absent or not the step.",
)
@memory_budget_option()
def inspect(
    path: str,
    fmt: str,
    strict: bool,
    rules: str | None,
    step_marker: str | None,
    memory_budget: float,
) -> None:
    """What the traces under PATH contain: ranks, steps, GPUs, collectives, warnings."""
    if step_marker:
        from tracescale.classify.rules import with_step_marker

        rules = with_step_marker(rules, step_marker)
    doc = inspect_path(path, memory_budget=int(memory_budget * 1e9), rules=rules)
    bad = _bad_files(doc)
    if not any(r.get("error") is None for s in doc for run in s["runs"] for r in run["ranks"]):
        first = next((r for s in doc for run in s["runs"] for r in run["ranks"]), None)
        if first is not None:
            raise InvalidTraceError(first["error"], path=first["file"])
    if fmt == "json":
        click.echo(json.dumps(doc, indent=1))
    else:
        render_table(doc)
    if strict and bad:
        raise InvalidTraceError(f"{len(bad)} bad rank file(s) (--strict): {bad[0]}")


def _starts_with(prefixes: tuple[str, ...]) -> Callable[[str], bool]:
    return lambda s: s.startswith(prefixes)
