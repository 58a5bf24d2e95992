"""``tracescale simulate``: write a simulated GPU training study with its exact truth.

A thin layer over :func:`tracescale.simulate.simulate`; the help text is the model's
documentation, so it is built from the parameter table itself. Progress goes to stderr (a
64-rank study takes a while), the summary line to stdout.
"""

from __future__ import annotations

import click

from tracescale.atomic import os_error_message
from tracescale.cli.settings import CONTEXT
from tracescale.errors import OutputError, UsageError
from tracescale.simulate import make_params, parse_sets, pattern_params
from tracescale.simulate import simulate as run_simulation
from tracescale.simulate.params import help_table

MODEL = """Write PyTorch Profiler (Kineto) traces of a simulated data-parallel
training job at several GPU counts, one .pt.trace.json.gz per rank in OUT/ws{N}/,
plus OUT/truth.json with the exact time per category per step, the serial
fraction and the true speedup at any N.

\b
One step on each rank (main thread + GPU streams 7 = compute, 13 = NCCL):
  1. DataLoader next() (user_annotation), GPU idle:
     dl_serial + dl_parallel/N (strong) or dl_serial + dl_parallel (weak)
  2. zero_grad: tiny fill kernels, launch-bound: the GPU waits on the host
     (host category), then host_work (Python, GPU idle, host category)
  3. H2D batch copy (cudaMemcpyAsync -> Memcpy HtoD), h2d_time/N
  4. forward and backward kernels (cudaLaunchKernel, same correlation),
     (fwd_time + bwd_time)/N; the host runs ahead so the GPU is busy
  5. backward launches one ncclDevKernel_AllReduce per bucket once
     comm_start of backward is done; each costs the ring model
     2(N-1)*alpha + 2(N-1)/N*bytes/bandwidth (none at N=1); the compute
     stream waits for the last bucket (Stream Wait Event), so AllReduce that
     outlasts backward is exposed and the rest overlaps backward
  6. optimizer: multi_tensor_apply kernels over the full replica (serial)
  7. loss.item(): aten::item > cudaStreamSynchronize until the GPU drains,
     then sync_stall of host work with the GPU idle (sync category)
  8. rank 0 only: reduce_metrics (reduce_time) while every other rank waits
     in a host-side c10d::barrier (record_param_comms 'barrier', no GPU
     kernel); the wait counts as reduction by cross-rank cause
  9. optional straggler_rank: forward+backward x straggler_factor; the
     others wait in the AllReduce (counted as compute by cross-rank cause)
Weak mode keeps the per-rank batch (steps 1, 3, 4 not divided by N) and the
AllReduce size, so T(N) grows only by communication and waits.
Jitter: seeded per step and rank; output is byte-identical for a seed.

\b
Training patterns (--pattern BASE[,MODIFIER...]; a modifier alone means ddp+it):
any pattern other than plain ddp runs on an event-level scheduler with the
dependency events real traces carry: cudaEventRecord / cudaStreamWaitEvent
and GPU 'Stream Wait Event' with wait_on_stream and
wait_on_cuda_event_record_corr_id, record_param_comms with In/Out msg
nelems, NCCL kernels named by algorithm and protocol (RING/TREE,
LL/LL128/SIMPLE by size), rank files named simnode{k}_{pid}... per node and
deviceProperties listing the node's gpus_per_node GPUs. Steps 1, 3, 4, 6
(optimizer), 7 as above; no zero_grad, host_work or rank-0 reduction.
  ddp          bucketed gradient AllReduce during backward (as above)
  fsdp         per layer: AllGather (In = shard = full/N, Out = full) before
               its forward and again before its backward, the compute stream
               waits for it, the next layer's AllGather is prefetched;
               ReduceScatter of its gradients after its backward (In = full,
               Out = shard); optimizer over the shard (opt_time/N)
  tp           AllReduce of act_bytes activations after every layer's forward
               and backward; the next layer waits for it; optimizer /N;
               data loading and the H2D copy are not divided (every rank
               reads the whole batch)
  grad_accum   collectives (ddp buckets, fsdp ReduceScatter) and the
               optimizer only every accum_steps-th ProfilerStep
  multinode    gpus_per_node ranks per host; a ring spanning nodes runs at
               inter_alpha / inter_bandwidth (preset: 30 us, bandwidth/6);
               older NCCL kernel names (ncclKernel_..._Sum_float)
  launch_bound ~2000 small kernels (layers=286) at 6 us launch each, so the
               GPU starves once kernels shrink below the launch rate
  heavy_tail   per-rank, per-step lognormal data-loading delay (tail_median,
               tail_sigma); the step waits for the slowest rank
  comm_types   a tiny Broadcast of module buffers (bcast_bytes) before each
               forward, bcast_alpha per hop, and a one-element loss AllReduce
               (TREE, LL) after backward, beside the gradient AllReduce
  cuda_graph   forward and backward with their collectives replayed from one
               CUDA graph per step: one cudaGraphLaunch (graph_launch), each
               node graph_gap after the node it follows (preset: layers=64)
  pp           pipeline parallel: pp_stages stages x DP replicas (rank =
               stage*DP + replica; N must be a multiple of pp_stages, DP grows
               with N); 1F1B over a global batch of microbatches (M/DP per
               replica per step in strong mode, M in weak); activations and
               gradients as nccl:send/nccl:recv (record_param_comms send/recv,
               ncclDevKernel_SendRecv, pair groups pp_<s>_<s+1>_dp<d>); after
               the last backward each stage AllReduces model_bytes/p over its
               DP group dp_<s>; optimizer opt_time/p; virtual_stages v > 1:
               interleaved 1F1B (Megatron's order). The bubble comes from the
               schedule; speedups are over N = pp_stages (preset: layers=2 per
               stage, fwd_time=0.16, bwd_time=0.32, act_bytes=4 MiB)
  moe          expert parallel: per layer dense kernels, all-to-all dispatch,
               expert GEMM (expert_time/layers x the rank's load), all-to-all
               combine (record_param_comms all_to_all, SendRecv kernel,
               (N-1)*alpha + (N-1)/N*a2a_bytes/bandwidth); loads drawn per step
               and rank (lognormal, imbalance), so ranks wait for the busiest;
               DDP buckets of the dense gradients
  zero2        DDP's buckets ReduceScattered during backward; optimizer over
               the 1/N shard; one AllGather per bucket of the updated
               parameters after it
  hsdp         FSDP inside each node (shard group of min(N, gpus_per_node)
               ranks, mesh_dp_shard) plus an AllReduce of each reduced shard
               across nodes (mesh_dp_replicate); N past one node must be whole
               nodes; below one node it is FSDP over the N ranks
  act_ckpt     activation checkpointing: each layer's forward recomputed in
               its backward inside CheckpointFunctionBackward (reentrant
               torch.utils.checkpoint); combines with every base
Refused combinations (one-line error): pp with cuda_graph, comm_types or
launch_bound; moe, zero2, hsdp or act_ckpt with cuda_graph.
Patterns' truth: per measured N the attribution of the traced schedule; at
every N in world sizes and --truth-at the expected step time of the same
schedule (noise-free; random delays averaged over replicas of all N ranks);
moe adds expert_imbalance (drawn loads minus balanced), act_ckpt recompute
(seconds per step), pp its bubble's 1F1B share per N.

\b
Parameters (--set NAME=VALUE; times in seconds at N=1):
  name                   default unit     meaning
"""


def _world_sizes(text: str, option: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{option} {text!r}: expected a comma list like 1,2,4,8") from None
    if not sizes or min(sizes) < 1:
        raise UsageError(f"{option} {text!r}: world sizes must be >= 1")
    return sizes


@click.command("simulate", help=MODEL + help_table(), context_settings=CONTEXT)
@click.option("--world-sizes", default="1,2,4,8", show_default=True, help="GPU counts to simulate.")
@click.option(
    "--out", required=True, type=click.Path(file_okay=False), help="Study folder to write."
)
@click.option("--mode", type=click.Choice(["strong", "weak"]), default="strong", show_default=True)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=None,
    help="Profiled steps per run [default: 5; grad_accum: 2 x accum_steps; heavy_tail: 20].",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Jitter seed.")
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override a model parameter (repeatable); see the table above.",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Processes writing rank files.",
)
@click.option(
    "--pattern",
    default="ddp",
    show_default=True,
    help="Training pattern: ddp|fsdp|tp|pp|moe|zero2|hsdp plus grad_accum, multinode, "
    "launch_bound, heavy_tail, comm_types, cuda_graph, act_ckpt, joined by ',' (see above).",
)
@click.option(
    "--truth-at",
    default="",
    metavar="N,N,...",
    help="World sizes for the truth's step time and speedup beyond the simulated ones "
    "[default: 2x, 4x, 8x the largest].",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
def simulate(
    world_sizes: str,
    out: str,
    mode: str,
    steps: int | None,
    seed: int,
    sets: tuple[str, ...],
    jobs: int,
    pattern: str,
    truth_at: str,
    quiet: bool,
) -> None:
    overrides = parse_sets(sets)
    plain = pattern.strip().lower() == "ddp"
    params = make_params(overrides) if plain else pattern_params(pattern, overrides)

    def progress(line: str) -> None:
        if not quiet:
            click.echo(f"tracescale simulate: {line}", err=True)

    try:
        truth = run_simulation(
            _world_sizes(world_sizes, "--world-sizes"),
            out,
            mode=mode,
            steps=steps,
            seed=seed,
            params=params,
            jobs=jobs,
            pattern=pattern,
            truth_at=_world_sizes(truth_at, "--truth-at") if truth_at.strip() else None,
            progress=progress,
        )
    except OSError as exc:  # everything simulate touches on disk is its output
        raise OutputError(os_error_message(exc), path=exc.filename or out) from exc
    sizes = truth["world_sizes"]
    of = "" if truth["pattern"] == "ddp" else f" of {truth['pattern']}"
    click.echo(
        f"wrote {sum(sizes)} rank traces{of} for N={','.join(map(str, sizes))} ({mode}) "
        f"and {out}/truth.json; serial fraction {truth['serial_fraction']:.3f}"
    )
