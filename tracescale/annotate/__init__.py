"""Rank trace files in -> copies with the attribution as added tracks out (Perfetto, chrome://tracing).

``tracescale annotate PATH -o OUT_DIR`` mirrors PATH's files under OUT_DIR. Each copy holds the
original events untouched plus one added process: a ``categories`` track whose slices are the
attribution (one complete event per contiguous stretch of one category within a step, waits
carrying their collective and cause) and a ``steps`` track with each step's breakdown. The
added events have their own ``cat``, which ingest skips, so the copies analyze exactly like the
originals. Inputs are only read; the same output rules as ``-o`` apply.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracescale.annotate.tracks import Slice, category_slices, step_slices
from tracescale.annotate.write import (
    METADATA_EVENTS,
    added_events,
    encoded_like,
    event_count,
    spliced,
    unused_pid,
)
from tracescale.atomic import atomic_write_chunks, check_output_path
from tracescale.classify.rules import load_rules
from tracescale.classify.run import build_run, group_waits
from tracescale.classify.single_rank import apply_single_rank
from tracescale.errors import InvalidTraceError, UsageError
from tracescale.ingest.decode import DEFAULT_MEMORY_BUDGET, read_bytes
from tracescale.ingest.discover import discover
from tracescale.pipeline import fail_on_rejected, map_ranks, run_groups

__all__ = ["AnnotatedTrace", "annotate"]


@dataclass(frozen=True)
class AnnotatedTrace:
    """One written copy: where from, where to, and what was added."""

    source: str
    output: str
    rank: int
    world_size: int
    steps: int
    slices: int


def _check_out_dir(out_dir: str, root: str) -> None:
    out, src = Path(out_dir).resolve(), Path(root).resolve()
    if out.exists() and not out.is_dir():
        raise UsageError("-o must be a folder (it exists and is not one)", path=out_dir)
    if out == src or src in out.parents:
        raise UsageError(
            "-o is inside the traces' folder: analyzing that folder again would count the "
            "annotated copies as more ranks; choose a folder outside it",
            path=out_dir,
        )


def _write_annotated(
    source: str,
    out: str,
    rank: int,
    cats: Iterable[Slice],
    steps: Iterable[Slice],
    memory_budget: int,
) -> int:
    """``source``'s bytes with the added process spliced in, written to ``out`` as they are
    made, and checked before it replaces anything by counting the events of the written file
    (a splice in the wrong place breaks the JSON or changes the count); returns how many
    events were added."""
    with open(source, "rb") as fh:
        head = fh.read(2)
    text = read_bytes(source, memory_budget=memory_budget)
    count = event_count(text, source)
    added = [0]

    def counted(events: Iterator[str]) -> Iterator[str]:
        for e in events:
            added[0] += 1
            yield e

    events = counted(added_events(unused_pid(text), rank, cats, steps))

    def verify(tmp: str) -> None:
        nonlocal text
        del text  # the original's bytes, before the copy is read back
        # the copy is bigger than the original: up to two added events per step, ~500 bytes
        written = read_bytes(tmp, memory_budget=8 * memory_budget)
        if event_count(written, source) != count + added[0]:
            raise InvalidTraceError("could not add tracks (the event count changed)", path=source)

    atomic_write_chunks(out, encoded_like(head, spliced(text, events, source)), verify)
    return added[0]


def annotate(
    path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    rules: str | None = None,
    jobs: int | None = None,
    force: bool = False,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    strict: bool = False,
    **parallel_options: Any,
) -> tuple[list[AnnotatedTrace], list[str]]:
    """Write an annotated copy of every rank file under ``path`` into ``out_dir``; returns
    what was written and the warnings (skipped files). ``force`` allows replacing files in
    ``out_dir`` that look like traces (earlier annotations); inputs are never written.
    ``strict``: any rejected rank file is an error (as for analyze), before anything is written."""
    src, dst = os.fspath(path), os.fspath(out_dir)
    if "://" in src:
        raise UsageError("annotate reads local trace files only", path=src)
    load_rules(rules)
    root = src if os.path.isdir(src) else os.path.dirname(os.path.abspath(src))
    specs = discover(src)  # first: a missing PATH is "no traces found", whatever -o says
    _check_out_dir(dst, root)
    if strict:
        fail_on_rejected(specs)
    results, map_warnings = map_ranks(
        specs, path=src, rules=rules, jobs=jobs, memory_budget=memory_budget, **parallel_options
    )
    warnings = list(map_warnings)
    plan = []
    for spec in specs:
        warnings += spec.warnings  # files left out at discovery (empty, not a trace)
        for run_spec in spec.runs:
            groups, notes = run_groups(run_spec, results, strict=strict)
            warnings += notes
            if not groups:
                continue
            run = build_run(run_spec.world_size, groups, run_spec.paths)
            for raw in groups:
                group, _ = apply_single_rank(raw)
                by_rank = {r.rank: r for r in group}
                waits = group_waits(group)
                for r in group:
                    mine = [w for w in waits if w.rank == r.rank]
                    out = os.path.join(dst, os.path.relpath(os.path.abspath(r.path), root))
                    check_output_path(out, [src], force)
                    plan.append((r, run_spec.world_size, out, by_rank, mine, run.steps))
    written = []
    # every output checked above before any is written; each rank's slices are made as it
    # is written, so one rank's tracks are held at a time
    for r, world_size, out, by_rank, mine, run_steps in plan:
        n_steps, steps = step_slices(r, run_steps)
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        added = _write_annotated(
            r.path, out, r.rank, category_slices(r, by_rank, mine), steps, memory_budget
        )
        n_cats = added - METADATA_EVENTS - n_steps
        written.append(AnnotatedTrace(r.path, out, r.rank, world_size, n_steps, n_cats))
    toml = os.path.join(root, "tracescale.toml")
    if os.path.isdir(src) and os.path.isfile(toml):
        os.makedirs(dst, exist_ok=True)
        shutil.copyfile(toml, os.path.join(dst, "tracescale.toml"))
    return written, list(dict.fromkeys(warnings))
