"""Find the runs of a study on disk: which files are which rank of which world size.

Layouts: a single trace file, a run folder (rank files of one run), a study folder whose
sub-folders are runs, or a parent of several studies. World size comes from ``distributedInfo``,
else the folder name, else the number of rank files. Only the head of each file is read here.
The sizes files claim are bounded (:mod:`.claims`), a file met twice counts once and a folder
that holds traces but is not read is named in a warning (:mod:`.layout`).
"""

from __future__ import annotations

import os
import re
import stat
import sys
from dataclasses import dataclass

from tracescale.errors import InvalidTraceError, NoTracesError, UsageError
from tracescale.ingest import remote
from tracescale.ingest.claims import MAX_WORLD_SIZE, check_heads, missing_ranks, size_detail
from tracescale.ingest.companions import companion_notes, pair_companions, with_companions
from tracescale.ingest.layout import SeenFiles, holds_traces, unread_note
from tracescale.ingest.sniff import EXECUTION_TRACE, FileHead, sniff

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_TRACE_SUFFIXES = (".json", ".json.gz", ".gz")
_WS_DIR_RE = re.compile(
    r"(?:^|[^a-z])(?:ws|gpus?|n|world_size=|nproc)[_=-]?(\d+)(?:$|[^0-9])", re.I
)
_WS_DIR_RE2 = re.compile(r"(?:^|[^0-9])(\d+)[_-]?(?:gpus?|ranks?)(?:$|[^a-z])", re.I)
_RANK_RE = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.I)
_SKIP_NAMES = {"truth.json", "tracescale.toml", "study.json"}


@dataclass(frozen=True)
class RankFile:
    """One trace file and the rank it belongs to."""

    path: str
    rank: int
    size: int
    rank_from: str  # "distributedInfo", "file name", or "order"
    #: The PyTorch execution trace paired with this rank whose dependencies the replay reads
    #: ("" none), its ``size:mtime_ns`` (a rewritten ET changes the study's cache key) and
    #: how many cross-thread dependencies it gave.
    execution_trace: str = ""
    execution_trace_stamp: str = ""
    et_dependencies: int = 0


@dataclass(frozen=True)
class RunGroup:
    """The rank files of one execution (one folder): collectives match within it."""

    folder: str
    files: tuple[RankFile, ...]


@dataclass(frozen=True)
class RunSpec:
    """All executions of one world size in a study (repeats are pooled)."""

    world_size: int
    label: str
    groups: tuple[RunGroup, ...]
    warnings: tuple[str, ...] = ()

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(f.path for g in self.groups for f in g.files)


@dataclass(frozen=True)
class StudySpec:
    """A study: runs at one or more world sizes.

    ``rejected``: (path, reason) of every trace-named file left out at discovery (empty, not
    JSON, not Kineto, an impossible rank); each is also a warning, and ``--strict`` fails on it.
    """

    path: str
    runs: tuple[RunSpec, ...]
    warnings: tuple[str, ...] = ()
    rejected: tuple[tuple[str, str], ...] = ()


def _is_candidate(name: str) -> bool:
    return name.endswith(_TRACE_SUFFIXES) and name not in _SKIP_NAMES and not name.startswith(".")


def _isfile(path: str) -> bool:
    return remote.is_file(path) if remote.is_url(path) else os.path.isfile(path)


def _trace_files(folder: str) -> tuple[list[str], list[str]]:
    """(trace-looking files directly in ``folder``, sub-folders), sorted, symlink loops skipped."""
    if remote.is_url(folder):
        files, dirs = remote.listing(folder)
        return [f for f in files if _is_candidate(f.rsplit("/", 1)[-1])], dirs
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except PermissionError as exc:
        raise InvalidTraceError("permission denied", path=folder) from exc
    except FileNotFoundError as exc:
        raise NoTracesError("no such file or folder", path=folder) from exc
    except OSError as exc:  # not a folder (a FIFO named in tracescale.toml), I/O error
        raise InvalidTraceError(f"cannot list: {exc.strerror or exc}", path=folder) from exc
    files, dirs = [], []
    for e in entries:
        try:
            if e.is_dir():
                dirs.append(e.path)
            elif e.is_file() and _is_candidate(e.name):
                files.append(e.path)
        except OSError:  # symlink loops and dangling links are not traces
            continue
    return files, dirs


def discover(path: str, _seen: set[str] | None = None) -> list[StudySpec]:
    """Studies under ``path``; raises NoTracesError when nothing looks like a trace."""
    seen = set() if _seen is None else _seen
    real = path if remote.is_url(path) else os.path.realpath(path)
    if real in seen:  # a symlink back up the tree: already visited
        raise NoTracesError("symlink cycle", path=path)
    seen.add(real)
    if remote.is_url(path):
        if not remote.exists(path):
            raise NoTracesError("no such file or folder", path=path)
    else:
        try:
            st = os.stat(path)
        except FileNotFoundError as exc:
            raise NoTracesError("no such file or folder", path=path) from exc
        except OSError as exc:
            raise InvalidTraceError(f"cannot open: {exc.strerror or exc}", path=path) from exc
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            raise InvalidTraceError(
                "not a regular file or folder (a FIFO, socket or device cannot be a trace)",
                path=path,
            )
    if _isfile(path):
        head = sniff(path, strict=True)
        run = _make_run([head], path, ws_hint=None, label=os.path.basename(path))
        assert run is not None  # without a rejected list, an impossible rank raises
        return [StudySpec(path=path, runs=(run,))]
    toml_path = os.path.join(path, "tracescale.toml")
    if not remote.is_url(path) and os.path.isfile(toml_path):
        return [_study_from_toml(path, toml_path)]
    files, dirs = _trace_files(path)
    if files:
        notes = [
            unread_note(d, f"{path} is read as one run folder (its own trace files)")
            for d in dirs
            if holds_traces(d, _is_candidate)
        ]
        return [_study_from_run_folders(path, [path], notes)]
    with_files = [d for d in dirs if _trace_files(d)[0]]
    if with_files:
        notes = [
            unread_note(
                d,
                f"no trace files directly in it, so not a run of {path} (a study "
                "inside a study folder? analyze it on its own)",
            )
            for d in dirs
            if d not in with_files
            and (_isfile(os.path.join(d, "tracescale.toml")) or holds_traces(d, _is_candidate))
        ]
        return [_study_from_run_folders(path, with_files, notes)]
    studies: list[StudySpec] = []
    for d in dirs:
        try:
            studies.extend(discover(d, seen))
        except NoTracesError:
            continue
    if not studies:
        raise NoTracesError("no trace files found", path=path)
    return studies


def _study_from_run_folders(study: str, folders: list[str], notes: list[str]) -> StudySpec:
    by_ws: dict[int, list[RunSpec]] = {}
    rejected: list[tuple[str, str]] = []
    seen = SeenFiles()
    for folder in folders:
        files, _ = _trace_files(folder)
        companions: list[FileHead] = []
        heads = _readable_heads(files, rejected, seen, companions)
        if not heads:
            notes.extend(companion_notes(companions, [], []))
            continue
        label = os.path.relpath(folder, study) if folder != study else os.path.basename(folder)
        ws_hint = _ws_from_name(os.path.basename(folder))
        run = _make_run(heads, folder, ws_hint=ws_hint, label=label, rejected=rejected)
        kept = [(f.path, f.rank) for g in run.groups for f in g.files] if run else []
        et_notes, paired = pair_companions(companions, heads, kept)
        notes.extend(et_notes)
        if run is not None:
            by_ws.setdefault(run.world_size, []).append(with_companions(run, paired))
    if not by_ws:
        if rejected:
            path, why = rejected[0]
            raise InvalidTraceError(
                f"no usable Kineto trace file ({len(rejected)} rejected; first: {path}: {why})",
                path=study,
            )
        raise NoTracesError("no Kineto trace files found", path=study)
    runs = [pool_repeats(ws, by_ws[ws], "folders") for ws in sorted(by_ws)]
    return _study(study, runs, rejected, [*notes, *seen.warnings])


def _readable_heads(
    files: list[str],
    rejected: list[tuple[str, str]],
    seen: SeenFiles,
    companions: list[FileHead] | None = None,
) -> list[FileHead]:
    """Heads of the files that look like traces; a file met before in the study is left out
    (``seen`` warns), an unreadable one goes to ``rejected``, a PyTorch execution trace (never
    a rank) to ``companions`` when given."""
    heads = []
    for f in files:
        if not seen.first_time(f):
            continue
        head = sniff(f, strict=False)
        if head.kind == EXECUTION_TRACE and companions is not None:
            companions.append(head)
        elif head.error:
            rejected.append((f, head.error))
        else:
            heads.append(head)
    return heads


def _study(
    path: str, runs: list[RunSpec], rejected: list[tuple[str, str]], notes: list[str]
) -> StudySpec:
    warnings = (*notes, *(f"{f}: skipped: {why}" for f, why in rejected))
    return StudySpec(path=path, runs=tuple(runs), warnings=warnings, rejected=tuple(rejected))


def pool_repeats(world_size: int, parts: list[RunSpec], what: str) -> RunSpec:
    """Runs of one world size pooled as repeats of one configuration (one RunSpec)."""
    note = f"{len(parts)} {what} with world size {world_size} pooled as repeats"
    return RunSpec(
        world_size=world_size,
        label=" + ".join(p.label for p in parts),
        groups=tuple(g for p in parts for g in p.groups),
        warnings=tuple(w for p in parts for w in p.warnings) + ((note,) if len(parts) > 1 else ()),
    )


def _ws_from_name(name: str) -> int | None:
    """The world size a folder name states (``ws8``, ``8gpus``); a number beyond the ceiling
    is no world size (a date, a job id) and states none."""
    for rx in (_WS_DIR_RE, _WS_DIR_RE2):
        m = rx.search(name)
        if m and 0 < int(m.group(1)) <= MAX_WORLD_SIZE:
            return int(m.group(1))
    return None


def _make_run(
    heads: list[FileHead],
    folder: str,
    ws_hint: int | None,
    label: str,
    rejected: list[tuple[str, str]] | None = None,
    hint_from: str = "folder name",
) -> RunSpec | None:
    """Ranks and world size of the files of one folder, with the consistency checks.

    A file whose rank cannot belong to the run (not below the world size) is left out and
    added to ``rejected`` when that list is given, else it is an error; None when no file is
    left. A folder name (``ws8``) or ``tracescale.toml`` that disagrees with
    ``distributedInfo`` is a warning: the traces' own word wins. A world size or rank beyond
    :data:`~tracescale.ingest.claims.MAX_WORLD_SIZE` in ``distributedInfo`` is an error
    whatever ``rejected`` is; no list or set grows with a claimed size.
    """
    warnings: list[str] = []
    check_heads(heads)
    sizes = {h.world_size for h in heads if h.world_size is not None}
    if len(sizes) > 1:
        raise InvalidTraceError(
            f"files of different world sizes in one folder: {size_detail(heads)}", path=folder
        )
    world = sizes.pop() if sizes else ws_hint
    if world is not None and ws_hint is not None and world != ws_hint:
        warnings.append(
            f"{folder}: the {hint_from} says world size {ws_hint} but distributedInfo says "
            f"{world}; using {world}"
        )
    ranked: list[RankFile] = []
    unknown: list[FileHead] = []
    for h in heads:
        if h.rank is not None:
            ranked.append(RankFile(h.path, h.rank, h.size, "distributedInfo"))
        elif (m := _RANK_RE.search(os.path.basename(h.path))) is not None:
            ranked.append(RankFile(h.path, int(m.group(1)), h.size, "file name"))
        else:
            unknown.append(h)
    used = {r.rank for r in ranked}
    nxt = 0
    for h in unknown:
        while nxt in used:
            nxt += 1
        ranked.append(RankFile(h.path, nxt, h.size, "order"))
        warnings.append(f"{h.path}: no rank in distributedInfo or file name; taken as rank {nxt}")
        used.add(nxt)
    bound = world if world is not None else MAX_WORLD_SIZE
    impossible = [r for r in ranked if r.rank >= bound]
    for r in impossible:
        field = "distributedInfo.rank" if r.rank_from == "distributedInfo" else "file name"
        why = (
            f"rank {r.rank} is not below the world size {world} ({field})"
            if world is not None
            else f"rank {r.rank} is beyond the ceiling of {MAX_WORLD_SIZE} ranks ({field})"
        )
        if rejected is None:
            raise InvalidTraceError(why, path=r.path)
        rejected.append((r.path, why))
    ranked = [r for r in ranked if r.rank < bound]
    if not ranked:
        return None
    distinct = sorted({r.rank for r in ranked})
    if world is None:
        world = max(len(distinct), max(distinct) + 1 if distinct else 1)
    n_missing, first_missing = missing_ranks(distinct, world)
    if n_missing:
        shown = ", ".join(map(str, first_missing)) + (" ..." if n_missing > 10 else "")
        warnings.append(
            f"{folder}: {len(distinct)} of {world} ranks present; missing ranks {shown}"
        )
    ranked.sort(key=lambda r: (r.rank, r.path))
    return RunSpec(
        world_size=world,
        label=label,
        groups=(RunGroup(folder=folder, files=tuple(ranked)),),
        warnings=tuple(warnings),
    )


def _study_from_toml(study: str, toml_path: str) -> StudySpec:
    """The runs ``tracescale.toml`` names. Its ``world_size`` is the fallback for traces
    without ``distributedInfo``; where they state one, they win and a warning says so (the
    report and the warning agree). A file named by two tables counts once; a sub-folder that
    holds traces but no table names is named in a warning."""
    try:
        with open(toml_path, "rb") as fh:
            conf = tomllib.load(fh)
    except (OSError, ValueError, RecursionError) as exc:  # TOMLDecodeError is a ValueError
        raise UsageError(f"cannot read tracescale.toml: {exc}", path=toml_path) from exc
    entries = conf.get("run", [])
    if not isinstance(entries, list) or not entries:
        raise UsageError("expected [[run]] tables with world_size and path", path=toml_path)
    runs: dict[int, list[RunSpec]] = {}
    rejected: list[tuple[str, str]] = []
    seen = SeenFiles()
    targets: list[str] = []
    for entry in entries:
        try:
            ws = int(entry["world_size"])
            rel = str(entry["path"])
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise UsageError("each [[run]] needs world_size and path", path=toml_path) from exc
        if not 1 <= ws <= MAX_WORLD_SIZE:
            raise UsageError(
                f"world_size must be >= 1 and <= {MAX_WORLD_SIZE} (the ceiling), not {ws}",
                path=toml_path,
            )
        target = os.path.join(study, rel)
        targets.append(target)
        files = [target] if os.path.isfile(target) else _trace_files(target)[0]
        fresh = [f for f in files if seen.first_time(f)]
        if files and not fresh:
            continue  # every file already counted under another [[run]] (a warning says so)
        heads = _readable_heads(fresh, rejected, SeenFiles())
        label = str(entry.get("label", rel))
        run = _make_run(heads, target, ws, label, rejected, "tracescale.toml") if heads else None
        if run is None:
            raise NoTracesError("no usable trace files for this [[run]]", path=target)
        runs.setdefault(run.world_size, []).append(run)
    out = [pool_repeats(ws, rs, "[[run]] tables") for ws, rs in sorted(runs.items())]
    return _study(study, out, rejected, [*seen.warnings, *_unnamed_folders(study, targets)])


def _unnamed_folders(study: str, targets: list[str]) -> list[str]:
    """Warnings for the sub-folders of ``study`` that hold traces but no [[run]] reaches."""
    named = [os.path.realpath(t) for t in targets]
    notes = []
    for d in _trace_files(study)[1]:
        real = os.path.realpath(d)
        if any(n == real or n.startswith(real + os.sep) for n in named):
            continue
        if holds_traces(d, _is_candidate):
            notes.append(unread_note(d, "holds traces but no [[run]] of tracescale.toml names it"))
    return notes
