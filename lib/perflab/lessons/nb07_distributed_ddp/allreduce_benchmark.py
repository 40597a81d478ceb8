"""The all-reduce benchmark of notebook 07: time, algorithm and bus bandwidth per size and
world size, as nccl-tests define them.

For a collective on ``n`` bytes taking ``t`` seconds on ``p`` ranks (nccl-tests,
doc/PERFORMANCE.md):

- algorithm bandwidth ``algbw = n / t``;
- bus bandwidth ``busbw = algbw * factor``, with ``factor = 2 (p - 1) / p`` for all-reduce
  (each rank sends and receives ``(p - 1) / p`` of the data twice, reduce-scatter then
  all-gather), ``(p - 1) / p`` for all-gather and reduce-scatter, 1 for broadcast. Bus bandwidth
  is comparable across world sizes and with the link's peak.

Each rank times its own calls; ranks report with ``all_gather_object`` and the row keeps the
slowest rank's median (a collective is done when its last rank is).
"""

from __future__ import annotations

import pandas as pd
import torch
import torch.distributed as dist

from perflab.distributed.launch import rank_device
from perflab.distributed.launch_sweep import launch_sweep
from perflab.measure.device import describe, resolve_device, synchronize
from perflab.measure.sweep import Sweep
from perflab.measure.timer import time_fn

MB = 10**6  # nccl-tests sizes are decimal: 1 MB = 10^6 bytes
BUS_FACTORS = {
    "all_reduce": lambda p: 2 * (p - 1) / p,
    "all_gather": lambda p: (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "broadcast": lambda p: 1.0,
}
SWEEP_KEY = ("world_size", "size_mb")


def bus_factor(collective: str, world_size: int) -> float:
    """nccl-tests' factor from algorithm to bus bandwidth."""
    if collective not in BUS_FACTORS:
        raise ValueError(f"unknown collective {collective!r}; valid: {', '.join(BUS_FACTORS)}")
    if world_size < 1:
        raise ValueError(f"world_size must be positive, got {world_size}")
    return BUS_FACTORS[collective](world_size)


def bandwidths(size_bytes: float, seconds: float, collective: str, world_size: int) -> dict:
    """``algbw`` and ``busbw`` in GB/s (10^9 bytes per second)."""
    algbw = size_bytes / seconds / 1e9
    return {"algbw_gbps": algbw, "busbw_gbps": algbw * bus_factor(collective, world_size)}


def _allreduce_measure(config: dict, warmup: int, steps: int) -> dict:
    """On every rank: time the all-reduce of ``config["size_mb"]`` MB of float32."""
    device = rank_device()
    world_size = dist.get_world_size()
    tensor = torch.ones(int(config["size_mb"] * MB) // 4, dtype=torch.float32, device=device)
    timing = time_fn(lambda: dist.all_reduce(tensor), warmup=warmup, steps=steps, device=device)
    per_rank = [None] * world_size
    dist.all_gather_object(per_rank, timing.median)
    seconds = max(per_rank)
    return {
        "bytes": tensor.numel() * 4,
        "time_ms": seconds * 1e3,
        "fastest_rank_ms": min(per_rank) * 1e3,
        **bandwidths(tensor.numel() * 4, seconds, "all_reduce", world_size),
        "steps": steps,
        "timing": "median per rank, slowest rank",
    }


def allreduce_sweep(
    path,
    sizes_mb: list[float],
    world_sizes: list[int],
    *,
    warmup: int = 2,
    steps: int = 5,
    resume: bool = True,
    metadata: dict | None = None,
) -> pd.DataFrame:
    """All-reduce time and bandwidth for every (world size, size) pair; rows in the Sweep CSV
    at ``path``. A world size the machine cannot hold becomes "error" rows."""
    sweep = Sweep(
        path,
        SWEEP_KEY,
        metadata={
            **describe(resolve_device("auto")),
            "collective": "all_reduce",
            **(metadata or {}),
        },
    )
    configs = [{"world_size": w, "size_mb": s} for w in world_sizes for s in sizes_mb]
    return launch_sweep(
        sweep,
        configs,
        _allreduce_measure,
        (warmup, steps),
        resume=resume,
        desc="all-reduce",
        collectives=("all_reduce",),
    )


def check_allreduce_rank() -> list[float]:
    """Each rank all-reduces ``[rank, 1]``; every rank must get ``[sum of ranks, world size]``."""
    tensor = torch.tensor([float(dist.get_rank()), 1.0], device=rank_device())
    dist.all_reduce(tensor)
    synchronize(tensor.device)
    return tensor.tolist()
