"""The study-level cache: a whole ``analyze`` document, reused when nothing it depends on changed.

A repeat ``analyze`` whose every rank file is unchanged would otherwise still decode 64 cached
per-rank entries, merge them, fit and replay, and import pandas and scipy to do so. This cache
keeps the finished document instead, keyed on everything that changes it:

- every rank file's identity exactly as the per-rank cache keys it (absolute path, size,
  ``mtime_ns``, rules digest, memory budget, code version), in the order discovery found them,
  plus everything discovery said (runs, ranks, warnings, rejected files);
- every option of the analysis (mode, projections, what-ifs, assumptions, steps, strictness,
  topology, replay on or off) and the rules file's contents (its digest);
- the code: the package version plus a hash of every source file of the package, and the
  versions of the numerical libraries the fits run on.

The slot (file name) is a hash of the study path and options, so a changed file replaces its
study's entry instead of piling up; the header repeats the whole key and any difference is a
miss. An entry is untrusted like a per-rank one (:mod:`.cache`): plain JSON behind a SHA-256
checksum verified before parsing, read only from a regular file below a size limit, never
pickle. The checksum only catches damage: whoever can write the cache can also write a valid
checksum, so a document is used only if it also holds the study schema's shape (the contract
``tracescale report`` enforces on a saved study) and no NaN or infinity (the writer never
stores one); anything else is a miss and is recomputed, so the renderers only ever see
documents of the shape they were written for. Nothing here imports pandas, scipy or the
classifier: a hit renders without them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

import tracescale
from tracescale.classify.rules import load_rules
from tracescale.ingest.discover import StudySpec
from tracescale.parallel.cache import (
    MAX_ENTRY_BYTES,
    ResultCache,
    code_version,
    file_key,
    read_regular_file,
)

MAGIC = b"TRACESCALE-SD-1\n"
FORMAT_VERSION = 1
_DIGEST = 32
#: Libraries whose numbers end up in the document (fits, bootstrap, percentiles).
_LIBRARIES = ("numpy", "scipy", "pandas")


class StudyEntryError(ValueError):
    """An entry that does not verify (damaged, crafted, foreign or stale): a miss."""


def study_key(
    path: str,
    specs: Sequence[StudySpec],
    options: Mapping[str, Any],
    rules: str | None,
    memory_budget: int,
) -> dict[str, Any] | None:
    """The full key of the document of ``specs`` under ``options``; None when a file cannot
    be versioned (missing, or remote without a modification time), so nothing is cached."""
    digest = load_rules(rules).digest
    files = []
    for spec in specs:
        for run in spec.runs:
            for group in run.groups:
                for f in group.files:
                    try:
                        key = file_key(f.path, digest, memory_budget)
                    except OSError:
                        return None
                    if key is None:
                        return None
                    files.append(key.as_dict())
    full = {
        "path": path,
        "cwd": os.getcwd(),
        "options": dict(options),
        "rules": digest,
        "memory_budget": memory_budget,
        "files": files,
        "discovered": [asdict(spec) for spec in specs],
        "code": f"{code_version()}+{package_digest()}",
        "libraries": library_versions(),
    }
    # The header stores JSON, so the key is compared in its JSON form (tuples become lists).
    out: dict[str, Any] = json.loads(json.dumps(full, sort_keys=True))
    return out


def slot_name(key: Mapping[str, Any]) -> str:
    """One slot per study path and options: a changed trace overwrites its study's entry."""
    text = json.dumps(
        [key["path"], key["cwd"], key["options"], key["rules"], key["code"]], sort_keys=True
    )
    return hashlib.sha256(text.encode()).hexdigest()[:40] + ".sd"


@functools.lru_cache(maxsize=1)
def package_digest() -> str:
    """A hash of every source and data file of the package (any edit changes documents)."""
    root = Path(tracescale.__file__).parent
    digest = hashlib.sha256()
    for source in sorted(root.rglob("*")):
        if source.suffix in (".py", ".toml", ".json") and "__pycache__" not in source.parts:
            digest.update(str(source.relative_to(root)).encode() + b"\0")
            digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def library_versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for name in _LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "missing"
    return out


def encode(doc: Mapping[str, Any], key: Mapping[str, Any]) -> bytes:
    """MAGIC | sha256 of the rest | header length | header (format, key) | document JSON."""
    head = json.dumps({"format": FORMAT_VERSION, "key": key}, sort_keys=True).encode()
    payload = json.dumps(doc, allow_nan=False).encode()
    body = len(head).to_bytes(8, "little") + head + payload
    return MAGIC + hashlib.sha256(body).digest() + body


def decode(blob: bytes, key: Mapping[str, Any]) -> dict[str, Any]:
    """The document in ``blob`` if it verifies, its header holds exactly ``key`` and it has
    the study schema's shape; else :class:`StudyEntryError`."""
    fixed = len(MAGIC) + _DIGEST + 8
    if len(blob) < fixed or blob[: len(MAGIC)] != MAGIC:
        raise StudyEntryError("not a study cache entry of this format")
    body = memoryview(blob)[len(MAGIC) + _DIGEST :]
    if hashlib.sha256(body).digest() != blob[len(MAGIC) : len(MAGIC) + _DIGEST]:
        raise StudyEntryError("checksum mismatch")
    n = int.from_bytes(body[:8], "little")
    if n > len(body) - 8:
        raise StudyEntryError("header length out of range")
    try:
        header = json.loads(bytes(body[8 : 8 + n]))
        doc = json.loads(bytes(body[8 + n :]), parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise StudyEntryError(f"not JSON: {exc}") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT_VERSION:
        raise StudyEntryError("unknown format version")
    if header.get("key") != key:
        raise StudyEntryError("stale entry (key differs)")
    if not isinstance(doc, dict) or "studies" not in doc or "schema_version" not in doc:
        raise StudyEntryError("not a study document")
    check_shape(doc)
    return doc


def _refuse_constant(name: str) -> Any:
    """``json.loads`` hook for NaN and Infinity, which :func:`encode` never writes."""
    raise ValueError(f"{name} in a cached document")


def check_shape(doc: dict[str, Any]) -> None:
    """Raise :class:`StudyEntryError` unless ``doc`` validates against the study schema.

    A crafted document with a valid checksum would otherwise reach the renderers, which trust
    the schema's types (a number where a list is due is a TypeError, exit 70); a saved study
    given to ``report`` is held to the same contract in :func:`tracescale.study.load`. The
    check is :func:`tracescale.report.schemas.check`, jsonschema's verdict without importing
    jsonschema, which alone took longer than the rest of a cached ``analyze``.
    """
    from tracescale.report.schemas import ShapeError, check

    try:
        check(doc)
    except ShapeError as exc:
        raise StudyEntryError(f"document {exc}") from exc


class StudyCache:
    """Study documents under the per-rank cache's directory (same safety rules)."""

    def __init__(self, directory: str | None = None) -> None:
        self._store = ResultCache(directory)

    @property
    def directory(self) -> str:
        return self._store.directory

    def get(self, key: Mapping[str, Any]) -> dict[str, Any] | None:
        """The document stored for exactly ``key``, else None (missing, stale, damaged)."""
        blob = read_regular_file(os.path.join(self.directory, slot_name(key)), MAX_ENTRY_BYTES)
        if blob is None:
            return None
        try:
            return decode(blob, key)
        except Exception:  # untrusted bytes: anything that does not verify is a miss
            return None

    def put(self, key: Mapping[str, Any], doc: Mapping[str, Any]) -> None:
        """Store ``doc`` atomically; a document JSON cannot hold exactly is not stored, and a
        failed write costs only the next run's time (the map already warned about the dir)."""
        try:
            blob = encode(doc, key)
        except (TypeError, ValueError):
            return
        self._store.put_bytes(os.path.join(self.directory, slot_name(key)), blob)
