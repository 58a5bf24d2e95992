"""Simulator parameters: one frozen dataclass, each field documented with unit and meaning.

Every part of the simulated training step is a parameter so a user (or a test) can make a
study dataloader-bound, communication-bound or straggler-bound with ``--set NAME=VALUE``.
Times are seconds at N=1 (strong mode divides the data-parallel parts by N).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass

from tracescale.errors import UsageError


@dataclass(frozen=True)
class SimParams:
    """Parameters of the simulated data-parallel training step (seconds, bytes, counts)."""

    dl_serial: float = 0.002
    dl_parallel: float = 0.030
    h2d_time: float = 0.004
    h2d_bytes: int = 67_108_864
    fwd_time: float = 0.040
    bwd_time: float = 0.080
    layers: int = 8
    opt_time: float = 0.006
    opt_kernels: int = 4
    zero_grad_kernels: int = 16
    fill_kernel_time: float = 2e-6
    host_work: float = 0.0005
    launch_overhead: float = 12e-6
    model_bytes: int = 100_000_000
    buckets: int = 4
    comm_start: float = 0.5
    alpha: float = 10e-6
    bandwidth: float = 50e9
    sync_stall: float = 0.003
    reduce_time: float = 0.004
    barrier_latency: float = 30e-6
    straggler_rank: int = -1
    straggler_factor: float = 1.5
    jitter: float = 0.01
    first_step: int = 10
    gpus_per_node: int = 8
    inter_alpha: float = 0.0
    inter_bandwidth: float = 0.0
    act_bytes: int = 16_777_216
    accum_steps: int = 4
    tail_median: float = 0.004
    tail_sigma: float = 1.0
    bcast_alpha: float = 300e-6
    bcast_bytes: int = 4096
    graph_launch: float = 30e-6
    graph_gap: float = 2e-6
    pp_stages: int = 4
    microbatches: int = 32
    virtual_stages: int = 1
    expert_time: float = 0.03
    a2a_bytes: int = 8_388_608
    imbalance: float = 0.2


#: name -> (unit, meaning); the order is the order ``--help`` lists them in.
PARAM_DOCS: dict[str, tuple[str, str]] = {
    "dl_serial": ("s", "DataLoader next() time that does not shrink with N (GPU idle)"),
    "dl_parallel": ("s", "DataLoader time of the global batch; /N in strong mode"),
    "h2d_time": ("s", "H2D batch copy at N=1 (Memcpy HtoD); /N in strong mode"),
    "h2d_bytes": ("B", "H2D batch bytes at N=1; /N in strong mode"),
    "fwd_time": ("s", "forward kernels at N=1 on compute stream 7; /N in strong mode"),
    "bwd_time": ("s", "backward kernels at N=1; /N in strong mode"),
    "layers": ("count", "layers: 3 forward + 4 backward kernels each (raise to grow traces)"),
    "opt_time": ("s", "optimizer kernels over the full replica (serial)"),
    "opt_kernels": ("count", "multi_tensor_apply_kernel launches per optimizer step"),
    "zero_grad_kernels": ("count", "tiny zero_grad fill kernels at step start (launch-bound)"),
    "fill_kernel_time": ("s", "GPU time of one zero_grad fill kernel (< launch_overhead)"),
    "host_work": ("s", "Python host work after zero_grad with the GPU idle (host category)"),
    "launch_overhead": ("s", "host time per launched op (cpu_op + cudaLaunchKernel)"),
    "model_bytes": ("B", "gradient bytes AllReduced per step (fp32)"),
    "buckets": ("count", "DDP gradient buckets (one AllReduce kernel each)"),
    "comm_start": ("fraction", "share of backward done when the first bucket is ready"),
    "alpha": ("s", "ring AllReduce latency per hop: 2(N-1)*alpha"),
    "bandwidth": ("B/s", "ring AllReduce bandwidth: 2(N-1)/N*bytes/bandwidth"),
    "sync_stall": ("s", "host work after loss.item() returns, GPU idle (sync category)"),
    "reduce_time": ("s", "rank-0 metric reduction; other ranks wait in c10d::barrier"),
    "barrier_latency": ("s", "c10d::barrier transfer time once every rank arrived (N>1)"),
    "straggler_rank": ("rank", "rank whose forward+backward is slower; -1 for none"),
    "straggler_factor": ("x", "slowdown of the straggler's forward+backward kernels"),
    "jitter": ("fraction", "sd of the seeded per-step, per-rank multiplicative noise"),
    "first_step": ("count", "number of the first ProfilerStep#N in the traces"),
    "gpus_per_node": ("count", "[patterns] ranks per host; rings past it cross nodes"),
    "inter_alpha": ("s", "[patterns] per-hop latency across nodes; 0: same as alpha"),
    "inter_bandwidth": ("B/s", "[patterns] bandwidth across nodes; 0: same as bandwidth"),
    "act_bytes": ("B", "[tp,pp] activation bytes: tp AllReduce per layer; pp send per microbatch"),
    "accum_steps": ("count", "[grad_accum] ProfilerSteps per optimizer step (K)"),
    "tail_median": ("s", "[heavy_tail] median of the per-rank, per-step lognormal delay"),
    "tail_sigma": ("", "[heavy_tail] sigma of the lognormal delay (heavier tail when larger)"),
    "bcast_alpha": ("s", "[comm_types] per-hop latency of the buffer Broadcast"),
    "bcast_bytes": ("B", "[comm_types] bytes of the buffer Broadcast each step"),
    "graph_launch": ("s", "[cuda_graph] host time of the step's one cudaGraphLaunch"),
    "graph_gap": ("s", "[cuda_graph] device gap between a graph node and the one it follows"),
    "pp_stages": ("count", "[pp] pipeline stages p; N = p x DP replicas (DP grows with N)"),
    "microbatches": ("count", "[pp] global batch M in microbatches: M/DP per replica (weak: M)"),
    "virtual_stages": ("count", "[pp] model chunks per stage v (interleaved 1F1B); 1: plain"),
    "expert_time": ("s", "[moe] expert GPU time of all layers' forward at N=1 (backward 2x)"),
    "a2a_bytes": ("B", "[moe] one rank's all-to-all buffer per dispatch/combine at N=1"),
    "imbalance": ("", "[moe] sigma of the lognormal expert load per step and rank"),
}

_FIELDS = {f.name: f for f in dataclasses.fields(SimParams)}


def _check(p: SimParams) -> None:
    """Reject values the schedule cannot honour, so no trace is silently wrong."""
    nonneg = (
        "dl_serial",
        "dl_parallel",
        "h2d_time",
        "fwd_time",
        "bwd_time",
        "opt_time",
        "fill_kernel_time",
        "host_work",
        "alpha",
        "sync_stall",
        "reduce_time",
        "barrier_latency",
        "jitter",
        "inter_alpha",
        "inter_bandwidth",
        "tail_median",
        "tail_sigma",
        "bcast_alpha",
        "graph_launch",
        "graph_gap",
        "expert_time",
        "imbalance",
    )
    for name in nonneg:
        value = getattr(p, name)
        if not math.isfinite(value) or value < 0:
            raise UsageError(f"simulator parameter {name} must be a finite number >= 0")
    for name in ("layers", "opt_kernels", "buckets", "gpus_per_node", "accum_steps",
                 "microbatches", "virtual_stages"):  # fmt: skip
        if getattr(p, name) < 1:
            raise UsageError(f"simulator parameter {name} must be >= 1")
    if p.act_bytes < 4 or p.bcast_bytes < 4 or p.a2a_bytes < 4:
        raise UsageError("act_bytes, bcast_bytes and a2a_bytes must be >= 4")
    if p.pp_stages < 2:
        raise UsageError("simulator parameter pp_stages must be >= 2")
    if p.imbalance > 2:
        raise UsageError("simulator parameter imbalance must be <= 2")
    if p.zero_grad_kernels < 0 or p.h2d_bytes < 0 or p.model_bytes < 4 * p.buckets:
        raise UsageError("zero_grad_kernels, h2d_bytes must be >= 0; model_bytes >= 4*buckets")
    if not (math.isfinite(p.launch_overhead) and p.launch_overhead >= 2e-9):
        raise UsageError("simulator parameter launch_overhead must be >= 2e-9")
    if p.fill_kernel_time > p.launch_overhead:
        raise UsageError("fill_kernel_time must not exceed launch_overhead")
    if not 0.0 <= p.comm_start <= 1.0:
        raise UsageError("simulator parameter comm_start must be within [0, 1]")
    if not (math.isfinite(p.bandwidth) and p.bandwidth > 0):
        raise UsageError("simulator parameter bandwidth must be > 0")
    if not (math.isfinite(p.straggler_factor) and p.straggler_factor > 0):
        raise UsageError("simulator parameter straggler_factor must be > 0")
    if p.jitter > 0.3:
        raise UsageError("simulator parameter jitter must be <= 0.3")


def _convert(name: str, raw: str) -> float | int:
    kind = _FIELDS[name].type
    try:
        if kind in (int, "int"):
            as_float = float(raw)
            if not as_float.is_integer():
                raise ValueError(raw)
            return int(as_float)
        return float(raw)
    except ValueError:
        raise UsageError(f"--set {name}={raw}: not a number") from None


def parse_sets(items: Iterable[str]) -> dict[str, float | int]:
    """Parse ``NAME=VALUE`` strings; unknown names are a usage error listing the known ones."""
    out: dict[str, float | int] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep:
            raise UsageError(f"--set {item!r}: expected NAME=VALUE")
        if name not in _FIELDS:
            known = ", ".join(PARAM_DOCS)
            raise UsageError(f"--set: unknown simulator parameter {name!r}; known: {known}")
        out[name] = _convert(name, raw.strip())
    return out


def make_params(
    overrides: dict[str, float | int] | None = None, base: SimParams | None = None
) -> SimParams:
    """Defaults (or ``base``) with ``overrides`` applied, validated."""
    overrides = dict(overrides or {})
    for name in overrides:
        if name not in _FIELDS:
            raise UsageError(f"unknown simulator parameter {name!r}")
        overrides[name] = _convert(name, repr(overrides[name]))  # 2e8 for an int field -> int
    params = dataclasses.replace(base or SimParams(), **overrides)  # type: ignore[arg-type]
    _check(params)
    return params


def params_dict(p: SimParams) -> dict[str, float | int]:
    """The parameters as a plain dict (truth.json's ``params``)."""
    return dataclasses.asdict(p)


def help_table() -> str:
    """One line per parameter (name, default, unit, meaning) for ``--help``."""
    defaults = SimParams()
    lines = []
    for name, (unit, text) in PARAM_DOCS.items():
        value = getattr(defaults, name)
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        lines.append(f"  {name:<18} {shown:>10} {unit:<8} {text}")
    return "\n".join(lines)
