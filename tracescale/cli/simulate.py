"""``tracescale simulate``: write a simulated GPU data-parallel study with its exact truth.

A thin layer over :func:`tracescale.simulate.simulate`; the help text is the model's
documentation, so it is built from the parameter table itself.
"""

from __future__ import annotations

import click

from tracescale.cli.settings import CONTEXT
from tracescale.errors import UsageError
from tracescale.simulate import make_params, parse_sets
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
Parameters (--set NAME=VALUE; times in seconds at N=1):
  name                   default unit     meaning
"""


def _world_sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--world-sizes {text!r}: expected a comma list like 1,2,4,8") from None
    if not sizes or min(sizes) < 1:
        raise UsageError(f"--world-sizes {text!r}: world sizes must be >= 1")
    return sizes


@click.command("simulate", help=MODEL + help_table(), context_settings=CONTEXT)
@click.option("--world-sizes", default="1,2,4,8", show_default=True, help="GPU counts to simulate.")
@click.option(
    "--out", required=True, type=click.Path(file_okay=False), help="Study folder to write."
)
@click.option("--mode", type=click.Choice(["strong", "weak"]), default="strong", show_default=True)
@click.option("--steps", type=int, default=5, show_default=True, help="Profiled steps per run.")
@click.option("--seed", type=int, default=0, show_default=True, help="Jitter seed.")
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override a model parameter (repeatable); see the table above.",
)
@click.option(
    "--jobs", type=int, default=1, show_default=True, help="Processes writing rank files."
)
def simulate(
    world_sizes: str,
    out: str,
    mode: str,
    steps: int,
    seed: int,
    sets: tuple[str, ...],
    jobs: int,
) -> None:
    params = make_params(parse_sets(sets))
    truth = run_simulation(
        _world_sizes(world_sizes), out, mode=mode, steps=steps, seed=seed, params=params, jobs=jobs
    )
    sizes = truth["world_sizes"]
    click.echo(
        f"wrote {sum(sizes)} rank traces for N={','.join(map(str, sizes))} ({mode}) "
        f"and {out}/truth.json; serial fraction {truth['serial_fraction']:.3f}"
    )
