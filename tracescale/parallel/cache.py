"""On-disk cache of per-rank results, so a repeat ``analyze``/``report``/``compare`` is fast.

One entry per (absolute path, rules digest, memory budget, tracescale version): the file name
is a hash of those, so a modified trace overwrites its old entry instead of piling up. The
entry's header repeats the whole key *with* the file's size and ``mtime_ns``; a header that
does not match exactly is a miss, so a stale entry is never used. Entries are written to a
temp file and renamed into place (atomic); anything unreadable is a miss and gets rewritten.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import pickle
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import tracescale
from tracescale.classify.rank import RankResult
from tracescale.parallel.tasks import RankTask, has_protocol

_MAGIC = b"TRACESCALE-RANK-1\n"
PICKLE_PROTOCOL = 5


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/tracescale``, else ``~/.cache/tracescale``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tracescale")


@dataclass(frozen=True)
class CacheKey:
    """What a cached result depends on; any change makes the entry stale."""

    path: str
    size: int
    mtime_ns: int
    rules: str
    memory_budget: int
    version: str

    def slot(self) -> str:
        """File name: the key without the file's size and mtime (one slot per file)."""
        text = "\0".join([self.path, self.rules, str(self.memory_budget), self.version])
        return hashlib.sha256(text.encode()).hexdigest()[:40] + ".pkl"

    def header(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()


def file_version(path: str) -> tuple[int, int] | None:
    """(size, mtime_ns) of a local file, or of a remote one when fsspec reports a time."""
    if not has_protocol(path):
        st = os.stat(path[len("file://") :] if path.startswith("file://") else path)
        return st.st_size, st.st_mtime_ns
    try:
        import fsspec

        fs, inner = fsspec.core.url_to_fs(path)
        info = fs.info(inner)
    except Exception:
        return None
    stamp = info.get("mtime") or info.get("LastModified") or info.get("updated")
    if stamp is None:
        return None
    text = stamp.isoformat() if hasattr(stamp, "isoformat") else str(stamp)
    return int(info.get("size") or 0), int(hashlib.sha256(text.encode()).hexdigest()[:15], 16)


def make_key(task: RankTask, rules_digest: str) -> CacheKey | None:
    """The task's key now, or None when the file cannot be versioned (not cached)."""
    path = task.path if has_protocol(task.path) else os.path.abspath(task.path)
    try:
        version = file_version(task.path)
    except OSError:
        return None  # missing file: the worker reports it
    if version is None:
        return None
    return CacheKey(path, version[0], version[1], rules_digest, task.memory_budget, code_version())


def code_version() -> str:
    """The version plus a hash of the ingest and classify sources that produce an entry.

    A development checkout changes results without a version bump; hashing the code that
    makes a RankResult keeps a stale entry from ever being used.
    """
    return f"{tracescale.__version__}+{_source_digest()}"


@functools.lru_cache(maxsize=1)
def _source_digest() -> str:
    root = Path(tracescale.__file__).parent
    digest = hashlib.sha256()
    for folder in ("ingest", "classify"):
        for source in sorted((root / folder).glob("*.*")):
            if source.suffix in (".py", ".toml"):
                digest.update(source.name.encode())
                digest.update(source.read_bytes())
    return digest.hexdigest()[:12]


class ResultCache:
    """Read and write entries under one directory; problems become one warning, not errors."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = os.path.abspath(directory or default_cache_dir())
        self.warnings: list[str] = []
        self._writable = True

    def get(self, key: CacheKey) -> RankResult | None:
        """The cached result for exactly ``key``, or None (missing, stale or corrupt)."""
        try:
            with open(os.path.join(self.directory, key.slot()), "rb") as fh:
                blob = fh.read()
        except OSError:
            return None
        header = key.header()
        head_len = len(_MAGIC) + 4
        if not blob.startswith(_MAGIC) or len(blob) < head_len:
            return None
        n = int.from_bytes(blob[len(_MAGIC) : head_len], "little")
        if blob[head_len : head_len + n] != header:
            return None
        try:
            result = pickle.loads(memoryview(blob)[head_len + n :])
        except Exception:
            return None
        return result if isinstance(result, RankResult) else None

    def put(self, key: CacheKey, payload: bytes) -> None:
        """Store a pickled :class:`RankResult` atomically; failures disable writing, once."""
        if not self._writable:
            return
        header = key.header()
        tmp = None
        try:
            os.makedirs(self.directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.directory)
            with os.fdopen(fd, "wb") as fh:
                fh.write(_MAGIC + len(header).to_bytes(4, "little") + header)
                fh.write(payload)
            os.replace(tmp, os.path.join(self.directory, key.slot()))
            tmp = None
        except OSError as exc:
            self._writable = False
            reason = exc.strerror or str(exc)
            self.warnings.append(
                f"cache directory {self.directory} is not writable ({reason}); results were "
                "not cached (use --cache-dir or --no-cache)"
            )
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
