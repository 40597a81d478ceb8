"""When does each data-parallel variant communicate? Rank 0's timeline of one training step,
from ``torch.profiler`` (notebook 07): the handout's Nsight screenshots of naive against
overlapped DDP, as a figure and as a number, the share of the all-reduce time that runs while
backward is still computing.

Each step is marked with profiler ranges "forward", "backward" and "sync" (the wait in
``finish_gradient_synchronization``); the collectives appear as the process group's own events
(``gloo:all_reduce``, ``nccl:all_reduce``), on whichever thread ran them. On a GPU the
profiler's CPU view shows when collectives were issued and waited for, not the NCCL kernels:
there, trace the CUDA activity (or use nsys) for the device timeline.
"""

from __future__ import annotations

import os

import pandas as pd
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function

from perflab.distributed.launch import launch, rank_device
from perflab.distributed.toy import loss_fn, toy_model, vocab_size
from perflab.implementations.ddp import make_data_parallel

PHASES = ("forward", "backward", "sync")
COLLECTIVE_PREFIXES = ("gloo:", "nccl:")


def _step(wrapped, inputs, targets) -> None:
    with record_function("forward"):
        loss = loss_fn(wrapped, inputs, targets)
    with record_function("backward"):
        loss.backward()
    with record_function("sync"):
        wrapped.finish_gradient_synchronization()


def _timeline_rank(
    variants: list[str],
    model: str,
    batch_size: int,
    seq_len: int,
    bucket_size_mb: float,
    warmup: int,
) -> list[dict]:
    """On every rank: for each variant, ``warmup`` steps, then one profiled step; rank 0
    returns the ranges and collectives of its profiled steps, in ms from each step's start."""
    # Kineto logs each profiler start and stop to stderr, which shows in a notebook under the
    # figure; level 6 keeps those lines out (set before the rank's first profile).
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    device = rank_device()
    generator = torch.Generator().manual_seed(dist.get_rank())
    rows = []
    for variant in variants:
        module = toy_model(model, seed=0).to(device)
        wrapped = make_data_parallel(variant, module, bucket_size_mb)
        ids = torch.randint(0, vocab_size(module), (batch_size, seq_len + 1), generator=generator)
        inputs, targets = ids[:, :-1].to(device), ids[:, 1:].to(device)
        for _ in range(warmup):
            _step(wrapped, inputs, targets)
        dist.barrier()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            _step(wrapped, inputs, targets)
        rows += [{"variant": variant, **row} for row in profiled_rows(prof, PHASES)]
    return rows if dist.get_rank() == 0 else []


def profiled_rows(prof, ranges: tuple[str, ...]) -> list[dict]:
    """The profiler ranges named in ``ranges`` (lane: their name) and the process group's
    collectives (lane "communication"), in ms from the first of them."""
    events = [
        e for e in prof.events() if e.name in ranges or e.name.startswith(COLLECTIVE_PREFIXES)
    ]
    start = min(e.time_range.start for e in events)
    return [
        {
            "lane": e.name if e.name in ranges else "communication",
            "name": e.name,
            "thread": e.thread,
            "start_ms": (e.time_range.start - start) / 1e3,
            "end_ms": (e.time_range.end - start) / 1e3,
        }
        for e in events
    ]


def ddp_timelines(
    variants: list[str],
    world_size: int,
    model: str,
    *,
    batch_size: int = 4,
    seq_len: int = 64,
    bucket_size_mb: float = 1.0,
    warmup: int = 2,
) -> pd.DataFrame:
    """Rank 0's timeline of one step of each variant (``make_data_parallel`` names), all in one
    launch of ``world_size`` ranks: one row per range or collective."""
    rows = launch(
        _timeline_rank,
        world_size,
        (list(variants), model, batch_size, seq_len, bucket_size_mb, warmup),
        collectives=("all_reduce", "broadcast"),
    )[0]
    return pd.DataFrame(rows)


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def overlap_table(timelines: pd.DataFrame) -> pd.DataFrame:
    """Per variant: the backward range, the time some collective was running (overlapping
    collectives counted once), how much of it fell inside backward, and that share."""
    out = []
    for variant, rows in timelines.groupby("variant", sort=False):
        backward = rows[rows["lane"] == "backward"]
        b_start, b_end = backward["start_ms"].min(), backward["end_ms"].max()
        comm = _union(
            list(
                zip(
                    rows.loc[rows["lane"] == "communication", "start_ms"],
                    rows.loc[rows["lane"] == "communication", "end_ms"],
                    strict=True,
                )
            )
        )
        total = sum(end - start for start, end in comm)
        hidden = sum(max(0.0, min(end, b_end) - max(start, b_start)) for start, end in comm)
        out.append(
            {
                "variant": variant,
                "backward_ms": b_end - b_start,
                "collectives": int((rows["lane"] == "communication").sum()),
                "communicating_ms": total,
                "during_backward_ms": hidden,
                "share_during_backward": hidden / total if total else float("nan"),
                "step_ms": rows["end_ms"].max(),
            }
        )
    return pd.DataFrame(out)
