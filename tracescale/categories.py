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

#: The ``cat`` of the events ``tracescale annotate`` adds to a trace (its attribution tracks):
#: ingest skips them, so an annotated trace analyzes exactly like the original.
ANNOTATION_CAT: Final[str] = "tracescale"

#: Prefix of a top op's name where activation checkpointing ran it again in backward
#: (``classify.recompute``): compute, named as the lever it is.
RECOMPUTE_PREFIX: Final[str] = "recompute: "
