"""Rank events -> one gzip Kineto file, byte-identical for the same inputs.

No wall clock anywhere: gzip's header time is 0, file names and ``baseTimeNanoseconds`` are
derived from the rank, and the event order is a seeded shuffle (real files are not sorted).
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from tracescale.simulate.events import Event

BASE_TIME_NS = 1_700_000_000_000_000_000
HOSTNAME = "simhost"


def rank_pid(rank: int) -> int:
    """A plausible, deterministic process id per rank."""
    return 41_000 + 17 * rank


def file_name(rank: int, host: str = HOSTNAME) -> str:
    """tensorboard_trace_handler style: ``{host}_{pid}.{time_ns}.pt.trace.json.gz``."""
    return f"{host}_{rank_pid(rank)}.{BASE_TIME_NS + 1_000_003 * (rank + 1)}.pt.trace.json.gz"


def device_properties(device: int, count: int = 0) -> list[dict[str, Any]]:
    """The GPUs the rank's process sees: only its own (``count`` 0), else the node's ``count``."""
    return [_device(d) for d in (range(count) if count else [device])]


def _device(device: int) -> dict[str, Any]:
    return {
        "id": device,
        "name": "NVIDIA A100-SXM4-80GB (simulated)",
        "totalGlobalMem": 85_899_345_920,
        "computeMajor": 8,
        "computeMinor": 0,
        "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536,
        "warpSize": 32,
        "sharedMemPerBlock": 49152,
        "numSms": 108,
        "regsPerMultiprocessor": 65536,
        "sharedMemPerBlockOptin": 166912,
        "sharedMemPerMultiprocessor": 167936,
    }


def trace_document(
    events: list[Event],
    metadata: list[Event],
    *,
    rank: int,
    world_size: int,
    device: int,
    seed: int,
    host: str = HOSTNAME,
    node_gpus: int = 0,
    nccl_version: str = "2.21.5",
    pgs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The top-level trace object with the events in a seeded shuffled order.

    ``node_gpus`` > 0 lists that many GPUs in ``deviceProperties`` (every GPU of the host);
    ``pgs``: the rank's process groups besides the world (``pg_config`` after it).
    """
    world = {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
             "pg_size": world_size, "ranks": list(range(world_size))}  # fmt: skip
    config = [world, *(pgs or [])]
    order = np.random.default_rng([seed, world_size, rank, 3]).permutation(len(events))
    shuffled = [events[i] for i in order.tolist()]
    return {
        "schemaVersion": 1,
        "deviceProperties": device_properties(device, node_gpus),
        "distributedInfo": {
            "backend": "nccl",
            "rank": rank,
            "world_size": world_size,
            "pg_count": len(config),
            "pg_config": config,
            "nccl_version": nccl_version,
        },
        "record_shapes": 0,
        "with_stack": 0,
        "traceEvents": shuffled + metadata,
        "traceName": file_name(rank, host)[: -len(".gz")],
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASE_TIME_NS,
    }


def atomic_write(path: Path, data: bytes) -> None:
    """Write via a temp file in the same folder + os.replace: readers never see half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def write_trace(path: Path, document: dict[str, Any], level: int = 6) -> int:
    """Encode, gzip (mtime 0, no file name in the header) and write; returns bytes written."""
    # Header spaced like Kineto's own output ("rank": 1): HTA finds ranks with a regex on it.
    head = {k: v for k, v in document.items() if k != "traceEvents"}
    text = json.dumps(head, separators=(", ", ": "))
    events = msgspec.json.encode(document.get("traceEvents", []))
    raw = text[:-1].encode() + b', "traceEvents": ' + events + b"}"
    data = gzip.compress(raw, compresslevel=level, mtime=0)
    atomic_write(path, data)
    return len(data)
