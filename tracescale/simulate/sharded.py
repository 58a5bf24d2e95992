"""Sharded data parallelism on the event-level engine: FSDP, HSDP and ZeRO-2.

Why one module: the three shard the same things differently. FSDP (``fsdp``) gathers each
layer's parameters before its forward and backward and ReduceScatters its gradients, over the
world. HSDP (``hsdp``) does the same inside a shard group of ``S = min(N, gpus_per_node)``
ranks (one node: PyTorch's ``init_device_mesh((N // S, S), ("dp_replicate", "dp_shard"))``)
and AllReduces each reduced shard over the replicate group (the ranks S apart, one per node)
once N outgrows a node; below one node it is FSDP over the N ranks. World sizes past one
node must be whole nodes. ZeRO-2 (``zero2``) keeps the parameters whole: DDP's buckets are
ReduceScattered during backward, the optimizer updates the rank's 1/N shard, and an AllGather
per bucket brings the updated parameters back before the next forward.
"""

from __future__ import annotations

from tracescale.errors import UsageError
from tracescale.simulate import checkpointing, layers
from tracescale.simulate import kernels as K
from tracescale.simulate.engine import Engine, Times
from tracescale.simulate.events import COMM_STREAM, COMPUTE_STREAM
from tracescale.simulate.groups import Groups
from tracescale.simulate.params import SimParams
from tracescale.simulate.spec import PatternSpec

FSDP_PRE_FORWARD = "FullyShardedDataParallel._pre_forward"
FSDP_PRE_BACKWARD = "FullyShardedDataParallel._pre_backward_hook"
ZERO_GATHER = "DeepSpeedZeroOptimizer.all_gather_dp_groups"
SHARD, REPLICATE = "mesh_dp_shard", "mesh_dp_replicate"


def shard_size(params: SimParams, n: int) -> int:
    """HSDP's shard group size at ``n`` ranks (a usage error where N is no whole nodes)."""
    gpn = params.gpus_per_node
    if n > gpn and n % gpn:
        raise UsageError(f"hsdp: world size {n} is past one node but not a multiple of "
                         f"gpus_per_node={gpn}")  # fmt: skip
    return min(n, gpn)


def mesh(params: SimParams, n: int) -> tuple[Groups, Groups | None]:
    """HSDP's shard groups and replicate groups (None within one node), named as DeviceMesh
    creates them: "1".."S" the replicate groups, then one shard group per node."""
    s = shard_size(params, n)
    nodes = n // s
    shard = tuple(tuple(range(k * s, (k + 1) * s)) for k in range(nodes))
    first = s + 1 if nodes > 1 else 1
    shards = Groups(SHARD, shard, tuple(str(first + k) for k in range(nodes)))
    if nodes == 1:
        return shards, None
    repl = tuple(tuple(range(j, n, s)) for j in range(s))
    return shards, Groups(REPLICATE, repl, tuple(str(1 + j) for j in range(s)))


def _layer(e: Engine, group: Groups | None) -> tuple[int, int]:
    """(full, shard) element counts of one layer's parameters over the shard group."""
    size = len(group.members[0]) if group is not None else e.n
    full = int(e.p.model_bytes) // 4 // e.p.layers
    full -= full % size
    return full, full // size


def _all_gather(e: Engine, group: Groups | None) -> tuple[Times, int]:
    """Unshard one layer (FSDP issues it from its own stream: no wait on compute)."""
    full, shard = _layer(e, group)
    return e.collective("allgather", shard, full, 4 * full, record=True, group=group)


def _groups(e: Engine, spec: PatternSpec) -> tuple[Groups | None, Groups | None]:
    """(shard, replicate) groups of this run: None, None for plain FSDP over the world."""
    return mesh(e.p, e.n) if spec.base == "hsdp" else (None, None)


def fsdp_forward(e: Engine, spec: PatternSpec, fwd: Times, dist: bool) -> None:
    """Per layer: compute waits for its AllGather; the next layer's AllGather is prefetched."""
    p = e.p
    shard, _ = _groups(e, spec)
    cum = K.cumulative(K.FWD_LAYER, p.layers)
    gathered = _all_gather(e, shard) if dist else None
    for layer in range(p.layers):
        if gathered is not None:
            e.wait_for(COMPUTE_STREAM, COMM_STREAM, FSDP_PRE_FORWARD, gathered)
            gathered = _all_gather(e, shard) if layer + 1 < p.layers else None
        layers.layer_kernels(e, K.FWD_LAYER, fwd, layer, cum)


def fsdp_backward(
    e: Engine, spec: PatternSpec, bwd: Times, fwd: Times, dist: bool, reduce: bool
) -> None:
    """Reverse order: re-gather (prefetch one ahead), compute, ReduceScatter the gradients
    (HSDP: then AllReduce the shard across nodes). Under gradient accumulation (``no_sync``)
    only the optimizer's step reduces; under ``act_ckpt`` the layer's forward runs again
    inside its checkpoint node, after the gather it needs."""
    p = e.p
    shard, replicate = _groups(e, spec)
    cum = K.cumulative(K.BWD_LAYER, p.layers)
    fwd_cum = K.cumulative(K.FWD_LAYER, p.layers)
    gathered = _all_gather(e, shard) if dist else None
    full, part = _layer(e, shard)
    for k, layer in enumerate(reversed(range(p.layers))):
        if gathered is not None:
            e.wait_for(COMPUTE_STREAM, COMM_STREAM, FSDP_PRE_BACKWARD, gathered)
            gathered = _all_gather(e, shard) if layer > 0 else None
        region = None
        if spec.has("act_ckpt"):
            region = checkpointing.open_region(e, fwd, layer, fwd_cum)
        layers.layer_kernels(e, K.BWD_LAYER, bwd, k, cum)
        if region is not None:
            checkpointing.close_region(e, region)
        if dist and reduce:
            e.collective("reduce_scatter", full, part, 4 * full, after=COMPUTE_STREAM,
                         group=shard)  # fmt: skip
            if replicate is not None:
                e.collective("allreduce", part, part, 4 * part, group=replicate)


def zero2_step(e: Engine, dist: bool) -> None:
    """The optimizer over the rank's 1/N shard, then one AllGather per bucket of the updated
    parameters; the next forward (here: ``loss.item()``'s drain) waits for them."""
    p = e.p
    layers.optimizer(e, p.opt_time / e.n)
    if not dist:
        return
    total = int(p.model_bytes) // 4
    for b in range(p.buckets):
        nel = total // p.buckets + (1 if b < total % p.buckets else 0)
        full = nel - nel % e.n
        e.collective("allgather", full // e.n, full, 4 * full, after=COMPUTE_STREAM)
    e.wait_for(COMPUTE_STREAM, COMM_STREAM, ZERO_GATHER)
