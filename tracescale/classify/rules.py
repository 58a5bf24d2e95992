"""Name rules as data: which events are data loading, syncs, reductions, collectives, kernels.

Rules are matched once per distinct string in a trace's string table, never per event, so
a million events cost as much as their few thousand distinct names.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from dataclasses import dataclass
from importlib import resources

import numpy as np
import numpy.typing as npt

from tracescale.classify.comm_kernels import BUILTIN_PATTERNS
from tracescale.errors import UsageError
from tracescale.ingest.trace import is_step_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HOST_TARGETS = ("dataloader", "sync", "reduction", "communication")
DEVICE_TARGETS = ("compute", "memcpy", "communication", "wait", "ignore")


@dataclass(frozen=True)
class Rule:
    """Regex on the event name, optional exact category, target state."""

    pattern: re.Pattern[str]
    cat: str | None
    target: str


@dataclass(frozen=True)
class RuleSet:
    """Host rules and device rules, user rules first; ``digest`` keys the cache."""

    host: tuple[Rule, ...]
    device: tuple[Rule, ...]
    digest: str
    #: ``[steps] marker``: a regex naming the step marker when ``ProfilerStep`` is not it
    #: (``--step-marker``); None lets :func:`~tracescale.ingest.steps.find_steps` choose.
    step_marker: str | None = None


def _parse(text: str, origin: str) -> tuple[list[Rule], list[Rule]]:
    return _parse_doc(_load(text, origin), origin)


def _load(text: str, origin: str) -> dict[str, object]:
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise UsageError(f"invalid rules TOML: {exc}", path=origin) from exc


def step_marker_of(doc: dict[str, object], origin: str) -> str | None:
    """The ``[steps] marker`` regex of a rules document, checked; None when absent."""
    table = doc.get("steps")
    if table is None:
        return None
    marker = table.get("marker") if isinstance(table, dict) else None
    if not isinstance(marker, str) or not marker:
        raise UsageError("[steps] needs marker = 'REGEX'", path=origin)
    try:
        re.compile(marker)
    except (re.error, RecursionError, OverflowError) as exc:
        raise UsageError(f"bad [steps] marker regex {marker!r}: {exc}", path=origin) from exc
    return marker


def _parse_doc(doc: dict[str, object], origin: str) -> tuple[list[Rule], list[Rule]]:
    out: dict[str, list[Rule]] = {"host": [], "device": []}
    for section, allowed in (("host", HOST_TARGETS), ("device", DEVICE_TARGETS)):
        entries = doc.get(section, [])
        if not isinstance(entries, list):
            raise UsageError(f"[[{section}]] must be an array of tables", path=origin)
        for entry in entries:
            if isinstance(entry, dict) and "builtin" in entry:
                # A named pattern kept in Python (the communication-kernel families).
                if str(entry["builtin"]) not in BUILTIN_PATTERNS:
                    known = ", ".join(BUILTIN_PATTERNS)
                    raise UsageError(f"unknown builtin {entry['builtin']!r} ({known})", path=origin)
                entry = {**entry, "pattern": BUILTIN_PATTERNS[str(entry["builtin"])]}
            if not isinstance(entry, dict) or "pattern" not in entry or "target" not in entry:
                raise UsageError(f"each [[{section}]] needs pattern and target", path=origin)
            target = str(entry["target"])
            if section == "host" and target not in (*allowed, "compute"):
                raise UsageError(
                    f"unknown host target {target!r} (one of {', '.join(allowed)})", path=origin
                )
            if section == "device" and target not in allowed:
                raise UsageError(
                    f"unknown device target {target!r} (one of {', '.join(allowed)})", path=origin
                )
            try:
                rx = re.compile(str(entry["pattern"]))
            except (re.error, RecursionError, OverflowError) as exc:
                raise UsageError(f"bad regex {entry['pattern']!r}: {exc}", path=origin) from exc
            cat = entry.get("cat")
            out[section].append(Rule(rx, str(cat) if cat is not None else None, target))
    return out["host"], out["device"]


def load_rules(user_file: str | None = None) -> RuleSet:
    """Defaults from the package, with the user's rules (if any) in front."""
    default_text = resources.files("tracescale.classify").joinpath("default_rules.toml").read_text()
    host, device = _parse(default_text, "default_rules.toml")
    digest = hashlib.sha256(default_text.encode())
    if user_file:
        if os.path.exists(user_file) and not os.path.isfile(user_file):
            raise UsageError("rules file is not a regular file (a FIFO or device?)", path=user_file)
        try:
            with open(user_file, encoding="utf-8") as fh:
                user_text = fh.read()
        except OSError as exc:
            raise UsageError(
                f"cannot read rules file: {exc.strerror or exc}", path=user_file
            ) from exc
        except UnicodeDecodeError as exc:
            raise UsageError(f"rules file is not UTF-8 text ({exc})", path=user_file) from exc
        user_doc = _load(user_text, user_file)
        uh, ud = _parse_doc(user_doc, user_file)
        host, device = uh + host, ud + device
        marker = step_marker_of(user_doc, user_file)
        digest.update(user_text.encode())
        return RuleSet(tuple(host), tuple(device), digest.hexdigest()[:16], marker)
    return RuleSet(tuple(host), tuple(device), digest.hexdigest()[:16])


def with_step_marker(user_file: str | None, marker: str) -> str:
    """A rules file holding ``user_file``'s rules and ``[steps] marker``: what
    ``--step-marker`` hands the analysis, which reads rules (and keys its caches) by file.

    Named by its content in the temporary folder, so the same options give the same file and
    the caches see the same digest; a marker already in ``user_file`` is replaced.
    """
    import json
    import tempfile

    try:
        re.compile(marker)
    except (re.error, RecursionError, OverflowError) as exc:
        raise UsageError(f"bad --step-marker regex {marker!r}: {exc}") from exc
    text = ""
    if user_file:
        load_rules(user_file)  # the user's file is checked where it is named
        with open(user_file, encoding="utf-8") as fh:
            text = fh.read()
        if step_marker_of(_load(text, user_file), user_file) is not None:
            text = re.sub(r"(?ms)^\[steps\].*?(?=^\[|\Z)", "", text)
    text = f"{text.rstrip()}\n\n[steps]\nmarker = {json.dumps(marker)}\n".lstrip()
    name = f"tracescale-rules-{hashlib.sha256(text.encode()).hexdigest()[:16]}.toml"
    path = os.path.join(tempfile.gettempdir(), name)
    if not os.path.isfile(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    return path


def pair_keys(high: npt.NDArray[np.integer], low: npt.NDArray[np.integer]) -> npt.NDArray[np.int64]:
    """One int64 per pair of int32 ids (-1 allowed in both): ``high << 32 | (low + 1)``.

    Sorting these sorts by ``(high, low)``; ``key >> 32`` and ``(key & 0xFFFFFFFF) - 1`` give
    the ids back.
    """
    return (high.astype(np.int64) << 32) | (low.astype(np.int64) + 1)


def classify_events(
    rules: tuple[Rule, ...],
    targets: tuple[str, ...],
    strings: tuple[str, ...],
    name: npt.NDArray[np.int32],
    cat: npt.NDArray[np.int32],
    *,
    step_names: npt.NDArray[np.bool_] | None = None,
) -> npt.NDArray[np.int8]:
    """Target index per event (-1 when no rule matches), first matching rule wins.

    Work is per distinct (cat, name) pair, so it stays cheap on huge traces. The pair is one
    int64 key ``(cat << 32) | name`` (ids are int32, -1 when absent): a 1-D unique is a plain
    sort, ~25x faster than ``np.unique(..., axis=0)`` over stacked rows, which sorts structs.

    ``ProfilerStep#N`` names are distinct per step, so a million steps would be a million
    regex walks over the rules: the rules see every such name of one category as the first
    in the string table (a prefix test finds them), so a rule cannot tell step numbers
    apart; the step windows read the numbers (:mod:`tracescale.ingest.steps`).
    ``step_names`` marks those names in ``strings`` (``TraceData.step_names``, found once
    per trace); without it the names the events use are tested here.
    """
    out = np.full(name.shape[0], -1, dtype=np.int8)
    if name.shape[0] == 0:
        return out
    keys, inverse = np.unique(pair_keys(cat, name), return_inverse=True)
    cats = (keys >> 32).astype(np.int64)
    names = ((keys & 0xFFFFFFFF) - 1).astype(np.int64)
    step = np.zeros(len(keys), dtype=np.bool_)
    used = names >= 0
    if step_names is not None:
        step[used] = step_names[names[used]]
    else:
        step[used] = np.fromiter(
            (is_step_name(strings[k]) for k in names[used].tolist()), np.bool_, int(used.sum())
        )
    step_at = np.flatnonzero(step)
    _, first, per_cat = np.unique(cats[step_at], return_index=True, return_inverse=True)
    asked = np.sort(np.concatenate([np.flatnonzero(~step), step_at[first]]))
    result = np.full(len(keys), -1, dtype=np.int8)
    for j, c, n in zip(asked.tolist(), cats[asked].tolist(), names[asked].tolist(), strict=True):
        result[j] = _first_target(
            rules, targets, strings[c] if c >= 0 else "", strings[n] if n >= 0 else ""
        )
    if len(step_at):
        result[step_at] = result[step_at[first]][per_cat.ravel()]
    return result[inverse.ravel()]


def _first_target(rules: tuple[Rule, ...], targets: tuple[str, ...], cat: str, name: str) -> int:
    """Index in ``targets`` of the first rule matching (cat, name); -1 when none does."""
    for r in rules:
        if r.cat is not None and r.cat != cat:
            continue
        if r.pattern.search(name):
            return targets.index(r.target) if r.target in targets else -1
    return -1
