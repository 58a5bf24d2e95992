"""On-disk cache of per-rank results, so a repeat ``analyze``/``report``/``compare`` is fast.

One entry per (absolute path, rules digest, memory budget, tracescale version): the file name
is a hash of those, so a modified trace overwrites its old entry instead of piling up. The
entry's header repeats the whole key *with* the file's size and ``mtime_ns``; a header that
does not match exactly is a miss, so a stale entry is never used. Entries are written to a
temp file and renamed into place (atomic).

An entry is untrusted input (anyone who can write the directory can craft one), so it holds
only arrays and JSON (:mod:`.entry`, never pickle), carries a checksum verified before parsing,
and is opened only when it is a regular file below a size limit (``O_NOFOLLOW | O_NONBLOCK``,
then ``fstat``: a FIFO, device, directory or symlink in a slot is never read). Anything that
does not verify is a miss, and the fresh result is written over it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import stat
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import tracescale
from tracescale.ingest.remote import is_url as has_protocol

if TYPE_CHECKING:  # the entry codec (pandas) loads only when an entry is read or written
    from tracescale.classify.rank import RankResult
    from tracescale.parallel.tasks import RankTask

#: Largest entry read back: a rank's compact result is megabytes; more is damage or an attack.
MAX_ENTRY_BYTES = 1 << 30
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
_OPEN_FLAGS |= getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


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
        """File name: the key without the file's size and mtime (one slot per file).

        The path is hashed as the bytes the OS gave (``os.fsencode``): a file name that is not
        UTF-8 reaches Python as text with lone surrogates, which plain ``encode`` refuses.
        """
        rest = "\0".join([self.rules, str(self.memory_budget), self.version])
        text = os.fsencode(self.path) + b"\0" + rest.encode()
        return hashlib.sha256(text).hexdigest()[:40] + ".rc"

    def as_dict(self) -> dict[str, str | int]:
        """The key as the JSON object an entry's header must repeat exactly."""
        out: dict[str, str | int] = json.loads(json.dumps(asdict(self)))
        return out


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
    try:
        return file_key(task.path, rules_digest, task.memory_budget)
    except OSError:
        return None  # missing file: the worker reports it


def file_key(path: str, rules_digest: str, memory_budget: int) -> CacheKey | None:
    """The key of ``path``'s result now; None for a remote file without a modification time.
    Raises OSError for a local file that cannot be stat'ed."""
    version = file_version(path)
    if version is None:
        return None
    where = path if has_protocol(path) else os.path.abspath(path)
    return CacheKey(where, version[0], version[1], rules_digest, memory_budget, code_version())


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


def read_regular_file(path: str, limit: int) -> bytes | None:
    """Contents of ``path`` when it is a regular file (not followed if a symlink) of at most
    ``limit`` bytes, else None; never blocks on a FIFO and never reads a device."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks = []
        left = st.st_size + 1  # one byte more: a file that grew is noticed, not truncated
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        blob = b"".join(chunks)
        return blob if len(blob) == st.st_size else None
    except OSError:
        return None
    finally:
        os.close(fd)


class ResultCache:
    """Read and write entries under one directory; problems become one warning, not errors."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = os.path.abspath(directory or default_cache_dir())
        self.warnings: list[str] = []
        self._writable = True

    def get(self, key: CacheKey) -> RankResult | None:
        """The cached result for exactly ``key``, or None (missing, stale, damaged or unsafe)."""
        blob = read_regular_file(os.path.join(self.directory, key.slot()), MAX_ENTRY_BYTES)
        if blob is None:
            return None
        from tracescale.parallel.entry import decode

        try:
            return decode(blob, key.as_dict())
        except Exception:  # untrusted bytes: whatever fails to verify or parse is a miss
            return None

    def put(self, key: CacheKey, result: RankResult) -> None:
        """Store ``result`` atomically; an unusable directory disables writing, once."""
        if not self._writable:
            return
        from tracescale.parallel.entry import encode

        try:
            blob = encode(result, key.as_dict())
        except ValueError:
            return  # data this format cannot hold exactly is simply not cached
        self.put_bytes(os.path.join(self.directory, key.slot()), blob)

    def put_bytes(self, slot: str, blob: bytes) -> None:
        """Write ``blob`` to ``slot`` (a file in this directory) atomically."""
        if not self._writable:
            return
        tmp = None
        try:
            os.makedirs(self.directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.directory)
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
        except OSError as exc:
            self._writable = False
            reason = exc.strerror or str(exc)
            self.warnings.append(
                f"cache directory {self.directory} is not writable ({reason}); results were "
                "not cached (use --cache-dir or --no-cache)"
            )
            self._discard(tmp)
            return
        try:
            os.replace(tmp, slot)  # replaces a damaged entry, FIFO or symlink; not a directory
        except OSError as exc:
            self._discard(tmp)
            self.warnings.append(
                f"cache entry {slot} cannot be replaced ({exc.strerror or exc}); "
                "that result was not cached"
            )

    @staticmethod
    def _discard(tmp: str | None) -> None:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
