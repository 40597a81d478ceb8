"""Do FSDP's weight gathers finish before the forward needs them? (the 2026 handout's
fsdp_accounting (b), notebook 08.) Rank 0's profiled forward under ``FSDP``: for every module
that holds weights, how long it waited for them ("fsdp.wait": the gather of the first module,
which nothing prefetched, or the wait for a prefetched one) and how long its own forward took
("fsdp.forward"), beside the process group's all-gathers. A prefetched gather that finished in
time costs its module no wait at all.

On a GPU the profiler's CPU view shows when collectives were issued and waited for; the NCCL
kernels themselves need the CUDA activity or nsys (the handout's Nsight screenshots).
"""

from __future__ import annotations

import os

import pandas as pd
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from perflab.distributed.ddp_timeline import profiled_rows
from perflab.distributed.launch import launch, rank_device
from perflab.distributed.toy import loss_fn, toy_model, vocab_size
from perflab.implementations.fsdp import FSDP

RANGES = ("fsdp.wait", "fsdp.forward")


def _timeline_rank(model: str, batch_size: int, seq_len: int, warmup: int) -> list[dict]:
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # keep Kineto's start/stop lines quiet
    device = rank_device()
    sharded = FSDP(toy_model(model, seed=0))
    generator = torch.Generator().manual_seed(dist.get_rank())
    ids = torch.randint(
        0, vocab_size(sharded.module), (batch_size, seq_len + 1), generator=generator
    ).to(device)
    for _ in range(warmup):  # whole steps, so the profiled forward is not the first
        loss_fn(sharded, ids[:, :-1], ids[:, 1:]).backward()
        sharded.finish_gradient_synchronization()
    dist.barrier()
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        sharded(ids[:, :-1])
    if dist.get_rank() != 0:
        return []
    rows = profiled_rows(prof, RANGES)
    # Modules run in registration order (which FSDP's prefetch assumes): the i-th wait is
    # module i's, and its weight matrices are the next all-gathers issued.
    waits = sorted((r for r in rows if r["lane"] == "fsdp.wait"), key=lambda r: r["start_ms"])
    matrices = [sum(sharded.specs[local].sharded for _, local in held) for _, held in sharded.units]
    for module, (row, count) in enumerate(zip(waits, matrices, strict=True)):
        row.update(module=module, gathers=count)
    return rows


def fsdp_forward_timeline(
    world_size: int, model: str, *, batch_size: int = 4, seq_len: int = 64, warmup: int = 1
) -> pd.DataFrame:
    """Rank 0's forward under ``FSDP`` on ``world_size`` ranks: one row per range ("fsdp.wait",
    "fsdp.forward") or collective, in ms from the first."""
    rows = launch(_timeline_rank, world_size, (model, batch_size, seq_len, warmup))[0]
    return pd.DataFrame(rows)


def gather_table(timeline: pd.DataFrame) -> pd.DataFrame:
    """One row per module that all-gathers weights: how long it waited, when its gathers ended
    against when it needed them (``slack_ms`` > 0: ready that long before), its own forward."""
    spans = timeline.assign(ms=timeline["end_ms"] - timeline["start_ms"])
    waits = spans[spans["lane"] == "fsdp.wait"].sort_values("start_ms")
    forwards = spans[spans["lane"] == "fsdp.forward"].sort_values("start_ms")
    gathers = spans[spans["lane"] == "communication"].sort_values("start_ms")
    rows, issued = [], 0
    for wait, forward_ms in zip(waits.itertuples(), forwards["ms"], strict=True):
        if not wait.gathers:
            continue
        own = gathers.iloc[issued : issued + int(wait.gathers)]
        issued += int(wait.gathers)
        rows.append(
            {
                "module": int(wait.module),
                "gathers": int(wait.gathers),
                "prefetched": int(wait.module) > 0,
                "wait_ms": wait.ms,
                "gather_ms": float(own["ms"].sum()),
                "slack_ms": wait.start_ms - float(own["end_ms"].max()),
                "forward_ms": forward_ms,
            }
        )
    table = pd.DataFrame(rows)
    return table.assign(ready_in_time=table["slack_ms"] >= 0)


def gather_summary(timeline: pd.DataFrame) -> dict:
    """The answer in numbers: of the modules whose gathers were prefetched, how many had them
    ready before they needed them, how long the others waited, against the whole forward."""
    table = gather_table(timeline)
    prefetched = table[table["prefetched"]]
    late = prefetched[~prefetched["ready_in_time"]]
    wall = float(timeline["end_ms"].max() - timeline["start_ms"].min())
    return {
        "modules_gathering": len(table),
        "prefetched": len(prefetched),
        "ready_in_time": int(prefetched["ready_in_time"].sum()),
        "late_wait_ms": float(late["wait_ms"].sum()),
        "first_wait_ms": float(table["wait_ms"].iloc[0]),
        "forward_wall_ms": wall,
        "median_gather_ms": float(table["gather_ms"].median()),
        "median_forward_ms": float(table["forward_ms"].median()),
    }
