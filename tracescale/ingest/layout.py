"""What discovery says about the files and folders it does not count: nothing found is silent.

Two rules that keep a study's numbers honest:

* **One file counts once.** A hard link in two run folders, a symlink to another run's rank
  file, or one path named by two ``[[run]]`` tables is the same bytes: counted twice it would
  pass for a repeat and halve the apparent noise. Files are told apart by (device, inode); the
  first place a file is met keeps it and every other place is a warning naming both paths.
* **A folder that holds traces but is not read is named.** A study inside a folder named like
  a world size (``n8/`` beside ``ws1/``), a sub-folder of a run folder, a folder that
  ``tracescale.toml`` does not name: each is left out with a warning saying why, so a missing
  world size is never a surprise in the report. Looking costs a bounded walk (a few levels, a
  few thousand entries) that stops at the first trace file.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from tracescale.ingest import remote

#: Levels below a folder searched for a trace file before it is called empty of traces.
_PROBE_DEPTH = 4
#: Directory entries examined per probe at most (a huge tree is not walked for a warning).
_PROBE_ENTRIES = 5000


class SeenFiles:
    """The files of one study met so far, by (device, inode); see the module docstring."""

    def __init__(self) -> None:
        self._first: dict[tuple[int, int], str] = {}
        self.warnings: list[str] = []

    def first_time(self, path: str) -> bool:
        """True the first time a file is met; False (and a warning) for a later alias of it.

        A remote file, or one that cannot be stat'ed, counts as new: reading it reports the
        problem where it belongs.
        """
        if remote.is_url(path):
            return True
        try:
            st = os.stat(path)
        except OSError:
            return True
        ident = (st.st_dev, st.st_ino)
        first = self._first.get(ident)
        if first is None:
            self._first[ident] = path
            return True
        how = (
            "named twice"
            if os.path.abspath(first) == os.path.abspath(path)
            else f"the same file as {first} (a hard link or a symlink)"
        )
        self.warnings.append(f"{path}: {how}; counted once")
        return False


def holds_traces(folder: str, is_candidate: Callable[[str], bool]) -> bool:
    """Whether ``folder`` or a folder a few levels below it holds a trace-named file.

    Bounded in depth and entries; symlinked folders are not followed (a loop costs nothing).
    """
    if remote.is_url(folder):
        return False
    budget = _PROBE_ENTRIES
    level = [folder]
    for _ in range(_PROBE_DEPTH + 1):
        below: list[str] = []
        for d in level:
            try:
                with os.scandir(d) as it:
                    for e in it:
                        budget -= 1
                        if budget < 0:
                            return False
                        try:
                            if e.is_dir(follow_symlinks=False):
                                below.append(e.path)
                            elif is_candidate(e.name) and e.is_file():
                                return True
                        except OSError:
                            continue
            except OSError:
                continue
        level = below
    return False


def unread_note(folder: str, why: str) -> str:
    """The warning for a folder that holds traces but is left out of the study."""
    return f"{folder}: not read: {why}"
