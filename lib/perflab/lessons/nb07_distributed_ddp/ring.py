"""The 2026 handout's alternate ring all-reduce, written with point-to-point sends, checked
against ``dist.all_reduce`` and timed beside it (notebook 07).

Every rank starts with y = x_i (S bytes). For t = 1 ... N-1, rank i sends the block it holds
from the step before, x_((i-t+1) mod N) (its own at t = 1), to rank i+1, receives
x_((i-t) mod N) from rank i-1 and adds it to y. After N-1 steps every rank has summed every
block. Each step moves S bytes over every rank's link, one step after the other, so with
per-rank egress W the time is about (N-1) S / W (plus a latency per step), against
2 (N-1)/N S / W for the reduce-scatter + all-gather ring: N/2 times slower for large S.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist

from perflab.distributed.launch import rank_device
from perflab.distributed.launch_sweep import launch_sweep
from perflab.lessons.nb07_distributed_ddp.allreduce_benchmark import MB
from perflab.measure.device import describe, resolve_device
from perflab.measure.stats import least_squares
from perflab.measure.sweep import Sweep
from perflab.measure.timer import time_fn

SWEEP_KEY = ("world_size", "size_mb")


def alternate_ring_all_reduce(x: torch.Tensor) -> torch.Tensor:
    """The sum of ``x`` over all ranks, by the handout's alternate ring (``x`` unchanged)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    total = x.clone()
    outgoing, incoming = x.clone(), torch.empty_like(x)
    for _ in range(world_size - 1):
        # one batch, so NCCL pairs the send and the receive (separate isend/irecv calls can
        # deadlock there); Gloo runs the same batch as two operations
        requests = dist.batch_isend_irecv(
            [
                dist.P2POp(dist.isend, outgoing, (rank + 1) % world_size),
                dist.P2POp(dist.irecv, incoming, (rank - 1) % world_size),
            ]
        )
        for request in requests:
            request.wait()
        total += incoming
        outgoing, incoming = incoming, outgoing  # pass on what just arrived
    return total


def check_ring_rank(numel: int = 1001, seed: int = 0) -> float:
    """On every rank: the largest difference between the alternate ring and ``all_reduce`` on
    fresh random float64 values (different on every rank)."""
    generator = torch.Generator().manual_seed(seed * 1000 + dist.get_rank())
    x = torch.randn(numel, generator=generator, dtype=torch.float64).to(rank_device())
    expected = x.clone()
    dist.all_reduce(expected)
    return float((alternate_ring_all_reduce(x) - expected).abs().max())


def _ring_measure(config: dict, warmup: int, steps: int) -> dict:
    """On every rank: time the alternate ring and ``all_reduce`` on ``size_mb`` MB of
    float32, in alternation (all_reduce, ring, ring, all_reduce per round) so that a slow
    moment falls on both; the row keeps the slowest rank's medians. Both leave the input
    unchanged, so both times include copies of it (the ring two: the running sum and the
    buffer it sends; ``all_reduce`` one), memory traffic the (N-1) S / W model leaves out."""
    device = rank_device()
    tensor = torch.ones(int(config["size_mb"] * MB) // 4, dtype=torch.float32, device=device)
    methods = {
        "ring": lambda: alternate_ring_all_reduce(tensor),
        "all_reduce": lambda: dist.all_reduce(tensor.clone()),
    }
    samples: dict[str, list[float]] = {name: [] for name in methods}
    for name in ("all_reduce", "ring") * max(warmup, 0):
        methods[name]()
    for _ in range(steps):
        for name in ("all_reduce", "ring", "ring", "all_reduce"):
            samples[name] += time_fn(methods[name], warmup=0, steps=1, device=device).samples
    medians = {name: float(np.median(s)) for name, s in samples.items()}
    per_rank = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, medians)
    return {
        "bytes": tensor.numel() * 4,
        "ring_ms": max(r["ring"] for r in per_rank) * 1e3,
        "all_reduce_ms": max(r["all_reduce"] for r in per_rank) * 1e3,
        "steps": steps,
        "timing": "median per rank of 2 x steps alternated calls, slowest rank; input copies "
        "included (ring 2, all_reduce 1)",
    }


def ring_sweep(
    path,
    sizes_mb: list[float],
    world_sizes: list[int],
    *,
    warmup: int = 1,
    steps: int = 3,
    resume: bool = True,
    metadata: dict | None = None,
) -> pd.DataFrame:
    """Alternate ring and ``all_reduce`` times for every (world size, size); rows in the Sweep
    CSV at ``path``."""
    sweep = Sweep(
        path,
        SWEEP_KEY,
        metadata={**describe(resolve_device("auto")), **(metadata or {})},
    )
    configs = [{"world_size": w, "size_mb": s} for w in world_sizes for s in sizes_mb]
    rows = launch_sweep(
        sweep, configs, _ring_measure, (warmup, steps), resume=resume, desc="ring all-reduce"
    )
    ok = rows["status"] == "ok"
    rows.loc[ok, "ring_over_all_reduce"] = rows.loc[ok, "ring_ms"] / rows.loc[ok, "all_reduce_ms"]
    return rows


def fit_ring_model(rows: pd.DataFrame) -> pd.DataFrame:
    """Per world size N, the least-squares line time = latency + slope * S through the ring's
    times, and the egress W = (N - 1) / slope it implies if time = (N-1) S / W holds; the same
    model for all world sizes predicts one W, so W's spread across N tests it. A latency is
    not negative: where the free fit's intercept falls below zero (noise at few sizes), the
    line is fitted through the origin instead (the least-squares fit with latency >= 0), and
    ``latency_at_bound`` says so."""
    out = []
    for world_size, group in rows[rows["status"] == "ok"].groupby("world_size"):
        if group["bytes"].nunique() < 2:
            continue
        size, seconds = group["bytes"].to_numpy(float), group["ring_ms"].to_numpy(float) / 1e3
        (latency, slope), r2 = least_squares([np.ones_like(size), size], seconds)
        at_bound = latency < 0
        if at_bound:
            (slope,), r2 = least_squares([size], seconds)
            latency = 0.0
        out.append(
            {
                "world_size": int(world_size),
                "latency_ms": latency * 1e3,
                "seconds_per_gb": slope * 1e9,
                "egress_gbps": (world_size - 1) / slope / 1e9,
                "r2": r2,
                "points": len(group),
                "latency_at_bound": at_bound,
            }
        )
    return pd.DataFrame(out)
