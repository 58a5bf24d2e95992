"""HSDP (hybrid sharded data parallel): FSDP inside each node, plain data parallel across them.

The mesh is PyTorch's ``init_device_mesh("cuda", (N // S, S), mesh_dim_names=("dp_replicate",
"dp_shard"))`` with ``S = min(N, gpus_per_node)``: per layer, the parameters are AllGathered
and the gradients ReduceScattered in the shard group (S contiguous ranks of one node), and each
rank's reduced shard is AllReduced across the replicate group (the ranks ``gpus_per_node``
apart, one per node) when there is more than one node. The shard group grows with N until it
fills a node and then stays; the replicate group appears only once N outgrows a node, and is
what grows from there on: read the other way round, the projections put the shard group's
collectives across nodes.

Process groups as DeviceMesh creates them: the world is "0"; then, dimension by dimension, one
``new_group`` per slice, numbered in creation order ("1".."S" the replicate groups, one per
position in a node; "S+1".. the shard groups, one per node), each with the description
``mesh_<dim name>``; each rank's ``pg_config`` lists the groups it is in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .gen import COMM, COMM2, COMPUTE, GELU, Pattern, _coll, _p, shards, step_begin, step_end
from .sched import Net, Sched
from .structures import _op

REPLICATE, SHARD = "mesh_dp_replicate", "mesh_dp_shard"


def mesh_shape(n: int, gpus_per_node: int) -> tuple[int, int]:
    """(replicate, shard) sizes at ``n`` ranks."""
    shard = min(n, gpus_per_node)
    return n // shard, shard


def mesh_pgs(r: int, n: int, gpus_per_node: int) -> list[dict[str, object]]:
    """Rank ``r``'s ``pg_config``: the world, its replicate group and its shard group."""
    _, shard = mesh_shape(n, gpus_per_node)

    def pg(name: int, desc: str, ranks: list[int]) -> dict[str, object]:
        return {"pg_name": str(name), "pg_desc": desc, "backend_config": "cuda:nccl",
                "pg_size": len(ranks), "ranks": ranks}  # fmt: skip

    return [
        pg(0, "default_pg", list(range(n))),
        pg(1 + r % shard, REPLICATE, list(range(r % shard, n, shard))),
        pg(1 + shard + r // shard, SHARD, list(range(r - r % shard, r - r % shard + shard))),
    ]


def _named(s: Sched, since: int, name: Callable[[int, int], str]) -> None:
    """Give the collective events recorded since ``since`` their group's name on each rank:
    DeviceMesh numbers the slices, so rank r's replicate (shard) group is another group, with
    another name, than rank 0's; the writer calls ``name(r, n)``."""
    for e in s.events[since:]:
        if "Process Group Name" in e.args:
            e.args["Process Group Name"] = name


def _replicate_name(shard: int) -> Callable[[int, int], str]:
    return lambda r, n: str(1 + r % shard)


def _shard_name(shard: int) -> Callable[[int, int], str]:
    return lambda r, n: str(1 + shard + r // shard)


def hsdp_step(s: Sched, p: Pattern, k: int) -> None:
    """One HSDP step: forward AllGathers each layer's parameters in the shard group before its
    compute; backward AllGathers again, computes the gradient and ReduceScatters it (shard
    group, its NCCL stream), then AllReduces the reduced shard across the replicate group (its
    own NCCL stream, after the ReduceScatter); the optimizer updates the shard once both
    streams are done."""
    gpn = p.net.gpus_per_node
    rep, shard = mesh_shape(s.n, gpn)
    g = shards(p, s.n)

    def shard_coll(coll: str, after: int | None, cname: str) -> None:
        since = len(s.events)
        _coll(s, p, coll, p.layer_bytes, COMM, after, "", cname, shard, desc=SHARD)
        _named(s, since, _shard_name(shard))

    step_begin(s, p)
    for layer in range(p.layers):  # forward
        shard_coll("allgather", COMPUTE if layer == 0 else None, "all_gather_into_tensor")
        s.wait_stream(COMPUTE, COMM)
        _op(s, p, "gemm", p.fwd / g, "aten::linear")
        _op(s, p, GELU, 0.15 * p.fwd / g, "aten::gelu")
    for _ in range(p.layers):  # backward, last layer first
        shard_coll("allgather", None, "_allgather_base")
        s.wait_stream(COMPUTE, COMM)
        _op(s, p, "gemm", 2 * p.fwd / g, "autograd::engine::evaluate_function: AddmmBackward0")
        if shard > 1:
            shard_coll("reduce_scatter", COMPUTE, "reduce_scatter_tensor")
        if rep > 1:
            since = len(s.events)
            _coll(s, p, "allreduce", p.layer_bytes / shard, COMM2, COMM, "", "allreduce",
                  rep, strided=True, desc=REPLICATE)  # fmt: skip
            _named(s, since, _replicate_name(shard))
    if rep > 1:
        s.wait_stream(COMPUTE, COMM2)
    step_end(s, p, True, True, p.optimizer / shard)


def _nodes(gpus_per_node: int) -> Net:
    """NVLink inside a node, a 6x slower link across nodes."""
    return Net(
        alpha=6e-6,
        bandwidth=150e9,
        inter_alpha=30e-6,
        inter_bandwidth=25e9,
        gpus_per_node=gpus_per_node,
        flat=False,
    )


def hsdp(gpus_per_node: int, sizes: tuple[int, ...] = (2, 4, 8, 16)) -> Pattern:
    """HSDP with ``gpus_per_node`` GPUs per node measured at ``sizes``, projected to 2x, 4x
    and 8x the largest."""
    return replace(
        _p(f"hsdp_{gpus_per_node}pn", sizes, layer_bytes=60e6, fwd=8e-3, skew=1e-3),
        net=_nodes(gpus_per_node),
        step_fn=hsdp_step,
        pgs_fn=mesh_pgs,
    )
