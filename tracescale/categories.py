"""The fixed attribution categories: their names and order are part of the JSON contract."""

from __future__ import annotations

from typing import Final

CATEGORIES: Final[tuple[str, ...]] = (
    "compute",
    "memcpy",
    "communication",
    "dataloader",
    "sync",
    "reduction",
    "host",
    "idle",
)

COLLECTIVE_TYPES: Final[tuple[str, ...]] = (
    "allreduce",
    "allgather",
    "reducescatter",
    "broadcast",
    "alltoall",
    "sendrecv",
    "barrier",
    "other",
)
