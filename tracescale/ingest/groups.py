"""RankTrace -> its process groups: one row per distinct group its collectives name, and the
group of every event that names one.

A collective's group is told by ``record_param_comms``' (and newer NCCL kernels') args:
``Process Group Name``, ``Group size`` and ``Process Group Ranks``, the member global ranks as
PyTorch formats them (``"[0, 1, 2, 3]"``; a list longer than 30 is cut to its first 30 and
``", ..."``). Names alone are not enough: DeviceMesh and ``split_group`` give disjoint groups
one name (each tensor-parallel pair is group "1" on its members), so instances are told
apart, and topology tiers read, by the member set. Each distinct ranks text is parsed once
per trace, never per event; a text that does not parse (or disagrees with ``Group size`` or
leaves out the rank itself) counts as absent. A cut or absent list is completed from
``Global rank start`` / ``Global rank stride`` (PyTorch writes them when the members are an
arithmetic progression, the usual case of a DeviceMesh dimension); failing that the group
falls back to ``distributedInfo.pg_config`` (by name, else by size).

The member set has a compact canonical text (:func:`members_text`: ``0-3``, ``0,8``,
``0-14/2``) that names an instance's group across ranks as ``name:members``
(:func:`group_key`); :func:`key_members` reads the members back.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tracescale.ingest.claims import MAX_GROUP_MEMBERS, MAX_WORLD_SIZE
from tracescale.ingest.trace import PGConfig, RankTrace

I32 = npt.NDArray[np.int32]

#: How many ranks PyTorch lists before cutting the list (``kTruncatLength``).
LISTED_AT_MOST = 30
#: The description PyTorch gives a group created without one: no role.
_NO_DESC = "undefined"


@dataclass(frozen=True)
class ProcessGroup:
    """One process group as a rank's trace names it."""

    name: str  # ``Process Group Name`` ('' when absent)
    size: int  # ``Group size``, else the number of members; -1 when unknown
    #: Member global ranks, sorted; None when unknown (list cut, absent or malformed)
    ranks: tuple[int, ...] | None
    #: Ranks the text lists when the list was cut (its first 30), else ()
    listed: tuple[int, ...] = ()
    #: ``Process Group Description`` (DeviceMesh: ``mesh_<dim>``); '' when absent or
    #: PyTorch's default ``undefined``
    desc: str = ""

    @property
    def key(self) -> str:
        """The instance key's group part: ``name(desc):members`` (see :func:`group_key`)."""
        return group_key(self.name, self.ranks, self.listed, self.desc)


@dataclass(frozen=True)
class GroupTable:
    """A trace's distinct process groups and, per event, its group's index (-1: none named)."""

    groups: tuple[ProcessGroup, ...]
    of_event: I32


def parse_ranks(text: str) -> tuple[tuple[int, ...] | None, tuple[int, ...]]:
    """(members, listed) of a ``Process Group Ranks`` text (JSON string or list).

    ``members`` is None when the list was cut (``listed`` then holds the ranks shown), empty,
    or not a list of distinct non-negative integers (``listed`` is then empty too).
    """
    s = text.strip()
    if s.startswith('"'):
        try:
            s = str(json.loads(s)).strip()
        except ValueError:
            return None, ()
    if len(s) < 2 or s[0] != "[" or s[-1] != "]":
        return None, ()
    body = s[1:-1].strip()
    cut = body.endswith("...")
    if cut:
        body = body[:-3].rstrip().removesuffix(",")
    if not body:
        return None, ()
    try:
        ranks = tuple(int(p) for p in body.split(","))
    except ValueError:
        return None, ()
    if min(ranks) < 0 or len(set(ranks)) != len(ranks):
        return None, ()
    if cut:
        return None, ranks
    return tuple(sorted(ranks)), ()


def members_text(ranks: tuple[int, ...]) -> str:
    """Compact canonical text of a sorted member set: ``5``, ``0,8``, ``0-3``, ``0-14/2``
    (an arithmetic progression), else its runs of consecutive ranks (``0-1,4-5``)."""
    if len(ranks) <= 2:
        return ",".join(map(str, ranks))
    step = ranks[1] - ranks[0]
    if all(b - a == step for a, b in itertools.pairwise(ranks)):
        return f"{ranks[0]}-{ranks[-1]}" + (f"/{step}" if step != 1 else "")
    runs: list[str] = []
    lo = prev = ranks[0]
    for r in (*ranks[1:], -2):
        if r == prev + 1:
            prev = r
            continue
        runs.append(str(lo) if lo == prev else f"{lo}-{prev}")
        lo = prev = r
    return ",".join(runs)


def group_key(
    name: str, ranks: tuple[int, ...] | None, listed: tuple[int, ...] = (), desc: str = ""
) -> str:
    """``name:members`` when the members are known; ``name:first...`` when the list was cut
    (the first listed rank tells disjoint groups of one name apart); else ``name``. A
    description is kept beside the name, ``name(desc)``: it names the group's role
    (:func:`key_role`), which holds across world sizes where the name may not."""
    if desc:
        name = f"{name}({desc})"
    if ranks:
        return f"{name}:{members_text(ranks)}"
    if listed:
        return f"{name}:{listed[0]}..."
    return name


def key_members(key: str) -> tuple[int, ...] | None:
    """Members encoded in a key of :func:`group_key` (None when it holds none)."""
    _, sep, text = key.rpartition(":")
    if not sep or not text or text.endswith("..."):
        return None
    out: list[int] = []
    try:
        for piece in text.split(","):
            span, _, step = piece.partition("/")
            lo, _, hi = span.partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1, int(step or 1)))
    except ValueError:
        return None
    return tuple(out) if out else None


def key_name(key: str) -> str:
    """The group name of a key of :func:`group_key` (with its description, if any)."""
    name, sep, _ = key.rpartition(":")
    return name if sep else key


def key_role(key: str) -> str:
    """What a group is across world sizes: its description when it has one (``mesh_dp``: a
    DeviceMesh creates one group per slice and numbers them in creation order, so a name
    means another group at another N), else its name."""
    head = key_name(key)
    if head.endswith(")") and "(" in head:
        return head[head.index("(") + 1 : -1]
    return head


def _config_group(
    pgs: tuple[PGConfig, ...], rank: int | None, name: str, size: int
) -> PGConfig | None:
    """The rank's ``pg_config`` group of that name (else, without a name, the only one of
    that size)."""
    mine = [p for p in pgs if rank is None or not p.ranks or rank in p.ranks]
    match = [p for p in mine if p.name == name] if name else [p for p in mine if p.size == size]
    return match[0] if len(match) == 1 else None


def resolve_group(
    trace: RankTrace,
    name: str,
    size: int,
    parsed: tuple[tuple[int, ...] | None, tuple[int, ...]] = (None, ()),
    start: int = -1,
    stride: int = -1,
    desc: str = "",
    budget: int = MAX_WORLD_SIZE,
) -> ProcessGroup:
    """A group from its args (``parsed``: :func:`parse_ranks` of its ranks text; ``start`` and
    ``stride``: ``Global rank start`` / ``Global rank stride``): members from the ranks text,
    else (cut or absent) from the progression start + k * stride, k < size, that PyTorch
    writes when the members are one (stride 0: a single rank; -1: irregular), when they agree
    with the size, the ranks listed and the rank itself; else from ``pg_config``. A progression
    is built only when ``size`` is within ``budget`` (members the caller may still allocate):
    ``Group size`` is a claim, and beyond that the members stay unknown."""
    rank = trace.meta.rank
    ranks, listed = parsed
    if (
        ranks is None
        and 0 < size <= budget
        and start >= 0
        and (stride > 0 or (stride == 0 and size == 1))
    ):
        progression = tuple(start + k * stride for k in range(size))
        if progression[: len(listed)] == listed:  # the cut list shows the same first ranks
            ranks = progression
    if ranks is not None and (
        (size > 0 and len(ranks) != size) or (rank is not None and rank not in ranks)
    ):
        ranks = None  # inconsistent with the other args: not this group's members
    if listed and size > 0 and size <= len(listed):
        listed = ()
    if size <= 0 and ranks is not None:
        size = len(ranks)
    conf = (
        _config_group(trace.meta.pg_config, rank, name, size)
        if ranks is None or not name or not desc
        else None
    )
    if conf is not None and conf.ranks and (size <= 0 or len(conf.ranks) == size):
        if ranks is None:
            ranks = tuple(sorted(conf.ranks))
        if ranks == tuple(sorted(conf.ranks)):  # unnamed in the args: the pg_config group
            name, desc = name or conf.name, desc or conf.desc
    if size <= 0 and ranks is not None:
        size = len(ranks)
    desc = "" if desc == _NO_DESC else desc
    return ProcessGroup(name, size, ranks, listed if ranks is None else (), desc)


def group_table(trace: RankTrace) -> GroupTable:
    """Every distinct (name, ranks text, group size, rank start, stride) the trace's events
    carry, resolved once."""
    ev = trace.events
    n = len(ev)
    of_event = np.full(n, -1, dtype=np.int32)
    rows = np.flatnonzero((ev.pg_name >= 0) | (ev.pg_ranks >= 0))
    if rows.size == 0:
        return GroupTable((), of_event)
    keys = np.stack(
        [
            ev.pg_name[rows].astype(np.int64),
            ev.pg_ranks[rows].astype(np.int64),
            ev.group_size[rows],
            ev.rank_start[rows].astype(np.int64),
            ev.rank_stride[rows].astype(np.int64),
            ev.pg_desc[rows].astype(np.int64),
        ],
        axis=1,
    )
    distinct, inverse = np.unique(keys, axis=0, return_inverse=True)
    strings = trace.strings
    parsed = {  # each distinct text once, whatever names and sizes it comes with
        i: parse_ranks(strings[i]) for i in set(distinct[:, 1].tolist()) if i >= 0
    }
    budget = MAX_GROUP_MEMBERS  # members built from progressions, over all groups
    resolved = []
    for name_id, ranks_id, size, start, stride, desc_id in distinct.tolist():
        group = resolve_group(
            trace,
            strings[name_id] if name_id >= 0 else "",
            int(size),
            parsed.get(ranks_id, (None, ())),
            start,
            stride,
            strings[desc_id] if desc_id >= 0 else "",
            budget=min(budget, MAX_WORLD_SIZE),
        )
        budget -= len(group.ranks or ())
        resolved.append(group)
    groups = tuple(resolved)
    of_event[rows] = inverse.reshape(-1).astype(np.int32)
    return GroupTable(groups, of_event)
