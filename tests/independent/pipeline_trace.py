"""Kineto JSON of a recorded pipeline-parallel run (tests/independent/pipeline.py): gen.py's
file layout and metadata, with each rank's pipeline pairs (interleaved: also the pair of the
last and first stages that closes the ring) and DP group in pg_config."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from .gen import _device_props

if TYPE_CHECKING:
    from .pipeline import PipePattern, _Rank


def write_ranks(pat: PipePattern, ranks: Sequence[_Rank], dp: int, folder: str) -> None:
    """Kineto JSON per rank of a recorded run at DP = dp (gen.py's layout and metadata)."""
    n = pat.stages * dp
    p = pat.stages
    gpn = pat.net.gpus_per_node
    os.makedirs(folder, exist_ok=True)
    for r in ranks:
        s, d = divmod(r.rank, dp)
        pgs: list[dict[str, object]] = [{"pg_name": "0", "pg_desc": "default_pg",
                                         "backend_config": "cuda:nccl", "pg_size": n,
                                         "ranks": list(range(n))}]  # fmt: skip
        for lo in (s - 1, s):
            if 0 <= lo < p - 1:
                pair = [lo * dp + d, (lo + 1) * dp + d]
                pgs.append({"pg_name": f"pp_{lo}_{lo + 1}", "pg_desc": "pipeline_pair",
                            "backend_config": "cuda:nccl", "pg_size": 2,
                            "ranks": pair})  # fmt: skip
        if pat.virtual > 1 and p > 2 and s in (0, p - 1):  # interleaved: the ring's closing pair
            pgs.append({"pg_name": f"pp_0_{p - 1}", "pg_desc": "pipeline_pair",
                        "backend_config": "cuda:nccl", "pg_size": 2,
                        "ranks": [d, (p - 1) * dp + d]})  # fmt: skip
        pgs.append({"pg_name": f"dp_{s}", "pg_desc": "data_parallel",
                    "backend_config": "cuda:nccl", "pg_size": dp,
                    "ranks": list(range(s * dp, (s + 1) * dp))})  # fmt: skip
        pid = 211_000 + 17 * r.rank
        dev = r.rank % gpn
        evs: list[dict[str, object]] = [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python3"}},
            {"ph": "M", "name": "process_name", "pid": dev, "tid": 0,
             "args": {"name": f"GPU {dev}"}},
        ]  # fmt: skip
        for e in r.events:
            a_ns = pat.t0_ns + round(float(e["a"]) * 1e9)  # type: ignore[arg-type]
            b_ns = pat.t0_ns + round(float(e["b"]) * 1e9)  # type: ignore[arg-type]
            args = dict(e["args"])  # type: ignore[call-overload]
            base = {"ph": "X", "cat": e["cat"], "name": e["name"], "ts": a_ns / 1000,
                    "dur": (b_ns - a_ns) / 1000, "args": args}  # fmt: skip
            if e["where"] == "host":
                base.update({"pid": pid, "tid": pid})
            else:
                args.update({"queued": 0, "device": dev, "context": 1})
                if e["cat"] == "gpu_memcpy":
                    args["bytes"] = 4096
                base.update({"pid": dev, "tid": int(str(e["where"]))})
            evs.append(base)
        dist = {"backend": "nccl", "rank": r.rank, "world_size": n, "pg_count": len(pgs),
                "pg_config": pgs, "nccl_version": "2.20.5"}  # fmt: skip
        doc = {"schemaVersion": 1, "deviceProperties": _device_props(gpn),
               "distributedInfo": dist, "record_shapes": 0, "traceEvents": evs,
               "traceName": f"node{r.rank // gpn}_{pid}.json", "displayTimeUnit": "ms",
               "baseTimeNanoseconds": 1_700_000_000_000_000_000}  # fmt: skip
        name = f"node{r.rank // gpn}_{pid}.{1733000000000 + r.rank}.pt.trace.json"
        with open(os.path.join(folder, name), "wb") as fh:
            fh.write(msgspec.json.encode(doc))  # 6x json.dumps on these documents
