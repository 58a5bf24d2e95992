"""A small but real DDP training job to profile at several world sizes.

Run under torchrun (``tracescale sweep`` does that at each N)::

    tracescale sweep --nproc 1,2,4 --out runs/strong -- examples/ddp_cpu.py --scaling strong

Every part a scaling study should see is real: a ``DataLoader`` + ``DistributedSampler`` whose
``__getitem__`` does per-sample CPU work (data loading shows on the main thread), an MLP
trained with DDP (gloo on CPU, nccl on GPUs: the gradient AllReduce), ``loss.item()`` each
step (a sync point on GPUs), and a rank-0 metric aggregation the other ranks wait for in a
broadcast. ``--scaling strong`` splits a fixed global batch over the ranks; ``--scaling weak``
keeps the per-rank batch fixed. One torch thread per rank, so N ranks use N cores.
"""

from __future__ import annotations

import argparse
import math
import os

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import record_function
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from tracescale.capture import Capture


class SyntheticSamples(Dataset[tuple[torch.Tensor, int]]):
    """Samples made on the fly with real CPU work, like decoding and augmenting an image.

    The work is numpy (not traced op by op), so the trace shows it as the DataLoader's
    ``__next__`` on the main thread without thousands of tiny events.
    """

    def __init__(self, size: int, features: int, classes: int, work: int, passes: int) -> None:
        self.size = size
        self.passes = passes
        self.features = features
        self.classes = classes
        self.work = work
        rng = np.random.default_rng(1234)
        self.mix = rng.standard_normal((work, work)).astype(np.float32) / math.sqrt(work)
        self.proj = rng.standard_normal((work, features)).astype(np.float32) / math.sqrt(work)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(index)
        raw = rng.standard_normal(self.work).astype(np.float32)
        for _ in range(self.passes):  # "decode + augment": dense passes over the raw sample
            raw = np.tanh(self.mix @ raw)
        x = raw @ self.proj
        return torch.from_numpy(np.ascontiguousarray(x)), index % self.classes


def make_model(features: int, hidden: int, classes: int, layers: int) -> nn.Module:
    blocks: list[nn.Module] = [nn.Linear(features, hidden), nn.ReLU()]
    for _ in range(layers - 1):
        blocks += [nn.Linear(hidden, hidden), nn.ReLU()]
    blocks.append(nn.Linear(hidden, classes))
    return nn.Sequential(*blocks)


def reduce_metrics(
    loss: torch.Tensor, correct: torch.Tensor, history: list[float], window: int
) -> float:
    """Gather per-rank metrics to rank 0, which summarizes them; others wait in a broadcast.

    The summary (a smoothed loss over a long synthetic window) is deliberately a few ms of
    serial rank-0 work: the pattern a scaling study must attribute to the reduction, not to
    the collective the other ranks block in.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    local = torch.stack([loss.detach().float(), correct.float()])
    gathered = [torch.zeros_like(local) for _ in range(world)] if rank == 0 else None
    dist.gather(local, gathered, dst=0)
    summary = torch.zeros(1, device=loss.device)
    if rank == 0:
        assert gathered is not None
        with record_function("reduce_metrics"):
            stacked = torch.stack(gathered).cpu().numpy()
            history.append(float(stacked[:, 0].mean()))
            series = np.resize(np.asarray(history, dtype=np.float64), window)
            smooth = np.convolve(series, np.ones(64) / 64.0, mode="valid")
            summary[0] = float(np.median(smooth))
    dist.broadcast(summary, src=0)
    return float(summary[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scaling", choices=["strong", "weak"], default="strong")
    parser.add_argument("--steps", type=int, default=7, help="training steps (>= profiled window)")
    parser.add_argument("--global-batch", type=int, default=64, help="strong: split over ranks")
    parser.add_argument("--per-rank-batch", type=int, default=32, help="weak: batch of each rank")
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--work", type=int, default=512, help="per-sample CPU work: vector size")
    parser.add_argument("--passes", type=int, default=24, help="per-sample CPU work: dense passes")
    parser.add_argument(
        "--reduce-window", type=int, default=50_000, help="rank-0 metric work (samples smoothed)"
    )
    parser.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes")
    parser.add_argument("--wait", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--active", type=int, default=5)
    parser.add_argument("--bucket-cap-mb", type=float, default=0.25)
    parser.add_argument("--out", default=None, help="study folder (default $TRACESCALE_OUT)")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    # Also runnable as a plain single process (no torchrun): a world of one.
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    use_cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if use_cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)

    if args.scaling == "strong":
        if args.global_batch % world:
            parser.error(f"--global-batch {args.global_batch} does not split over {world} ranks")
        batch = args.global_batch // world
    else:
        batch = args.per_rank_batch
    dataset = SyntheticSamples(
        batch * world * (args.steps + 1), args.features, args.classes, args.work, args.passes
    )
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(
        dataset,
        batch_size=batch,
        sampler=sampler,
        num_workers=args.num_workers,
        drop_last=True,
        pin_memory=use_cuda,
    )

    model = make_model(args.features, args.hidden, args.classes, args.layers).to(device)
    ddp = DDP(
        model,
        device_ids=[device.index] if use_cuda else None,
        bucket_cap_mb=args.bucket_cap_mb,
    )
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    history: list[float] = []

    capture = Capture(args.out, wait=args.wait, warmup=args.warmup, active=args.active)
    steps = max(args.steps, capture.steps_needed)
    epoch = 0
    sampler.set_epoch(epoch)
    batches = iter(loader)
    with capture:
        for _ in range(steps):
            try:
                x, y = next(batches)
            except StopIteration:
                epoch += 1
                sampler.set_epoch(epoch)
                batches = iter(loader)
                x, y = next(batches)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            logits = ddp(x)
            loss = loss_fn(logits, y)
            loss.backward()
            optimizer.step()
            loss_value = loss.item()
            correct = (logits.argmax(dim=1) == y).sum()
            smoothed = reduce_metrics(loss, correct, history, args.reduce_window)
            capture.step()
    if rank == 0:
        print(f"ws{world} {args.scaling}: last loss {loss_value:.4f}, smoothed {smoothed:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
