"""Process groups smaller than the world: each pipeline stage's data-parallel group, each
node's shard group and the replicate group across nodes (HSDP), a pipeline's stage pairs.

Why: the default patterns run every collective over the world, so one transfer start (the
last rank of all) is right for every rank. Once the world is split into groups, each group
meets on its own: its transfer starts when *its* last member arrived, costs the model at its
own size on the slowest link it crosses, and the trace names the group the way PyTorch does
(``Process Group Name`` / ``Description`` / ``Ranks`` on ``record_param_comms`` and the
kernel, the group in the rank's ``distributedInfo.pg_config``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tracescale.simulate import comm_model
from tracescale.simulate.params import SimParams

if TYPE_CHECKING:
    from tracescale.simulate.engine import Engine, Times


@dataclass(frozen=True)
class Groups:
    """One kind of process group: disjoint member lists, one process-group name each."""

    desc: str
    members: tuple[tuple[int, ...], ...]
    names: tuple[str, ...]

    def index(self, n: int) -> np.ndarray:
        """Group index per rank (-1: the rank is in no group of this kind)."""
        out = np.full(n, -1, np.int64)
        for i, ranks in enumerate(self.members):
            out[list(ranks)] = i
        return out

    def args(self, n: int, seq: int) -> tuple[dict[str, Any], ...]:
        """Per rank: the group arguments ``record_param_comms`` carries."""
        index = self.index(n)
        out = []
        for r in range(n):
            g = int(index[r])
            ranks = self.members[g] if g >= 0 else (r,)
            out.append({"Group size": len(ranks), "Process Group Name": self.names[max(g, 0)],
                        "Process Group Description": self.desc,
                        "Process Group Ranks": str(list(ranks)), "Seq": seq})  # fmt: skip
        return tuple(out)

    def pg_config(self, rank: int) -> list[dict[str, Any]]:
        """The groups of this kind that ``rank`` is in, as ``distributedInfo.pg_config``."""
        return [
            {"pg_name": name, "pg_desc": self.desc, "backend_config": "cuda:nccl",
             "pg_size": len(ranks), "ranks": list(ranks)}
            for name, ranks in zip(self.names, self.members, strict=True)
            if rank in ranks
        ]  # fmt: skip


def spans_nodes(ranks: tuple[int, ...], gpus_per_node: int) -> bool:
    return len({r // gpus_per_node for r in ranks}) > 1


def meet(
    e: Engine, groups: Groups, ready: Times, coll: str, full_bytes: int
) -> tuple[Times, Times, Times]:
    """Per rank: when its group's transfer starts, its late member, the transfer's end."""
    p: SimParams = e.p
    xfer = ready.copy()
    late = np.broadcast_to(np.arange(e.n), ready.shape).copy()
    end = ready.copy()
    for ranks in groups.members:
        idx = np.asarray(ranks)
        start = ready[:, idx].max(axis=1, keepdims=True)
        xfer[:, idx] = start
        late[:, idx] = idx[ready[:, idx].argmax(axis=1)][:, None]
        seconds = 0.0
        if not e.free_transfers:
            spans = spans_nodes(ranks, p.gpus_per_node)
            seconds = comm_model.transfer_seconds(p, len(ranks), coll, full_bytes, spans)
        end[:, idx] = start + np.rint(seconds * 1e9 * e.shared_jitter()).astype(np.int64)
    return xfer, late, end


def stamp(e: Engine, mark: int, per_rank: tuple[dict[str, Any], ...]) -> None:
    """Give the communication events recorded since ``mark`` their per-rank group arguments."""
    for i in range(mark, len(e.events)):
        t = e.events[i]
        if "Collective name" in t.args:
            e.events[i] = replace(t, per_rank=per_rank)


def register(e: Engine, groups: Groups) -> None:
    """Remember a group kind for the ranks' ``pg_config`` (in first-use order)."""
    if groups not in e.groups:
        e.groups.append(groups)
