"""Step time of each data-parallel variant (notebook 07), and the share spent communicating.

Every rank trains the same model on its own batch with AdamW; a step is zero_grad, forward,
backward, ``finish_gradient_synchronization()`` and the optimizer step. All variants of a run
live in one launch and take turns, one step each per round (the starting variant rotates),
so that a shared machine's slow moments fall on all of them alike; the ranks meet at a
barrier before each step. A row keeps the slowest rank's median step. ``sync_ms`` is the time
spent inside ``finish_gradient_synchronization`` (communication not hidden behind backward;
PyTorch's DDP hides it all inside backward, so it has none to show). The communication share
is ``1 - compute-only step / step``, the compute-only step being the "none" variant (no
communication at all), measured in the same rounds.
"""

from __future__ import annotations

import statistics
import time

import pandas as pd
import torch
import torch.distributed as dist

from perflab.bench.sweep import Sweep
from perflab.device import describe, resolve_device, synchronize
from perflab.distributed.ddp import make_data_parallel
from perflab.distributed.launch import RankError, check_world_size, launch, rank_device
from perflab.distributed.sweeps import error_message
from perflab.distributed.toy import build_model, loss_fn, vocab_size

SWEEP_KEY = ("world_size", "model", "variant", "bucket_size_mb")
TIMING = "median of interleaved steps (variants take turns), slowest rank"


class _Trainer:
    """One variant's model, optimizer and batch; ``step()`` times its parts."""

    def __init__(self, config: dict, batch_size: int, seq_len: int):
        module = build_model(config["model"], seed=0)
        self.module = module
        self.wrapped = make_data_parallel(config["variant"], module, config["bucket_size_mb"])
        self.optimizer = torch.optim.AdamW(self.wrapped.parameters(), lr=1e-4)
        generator = torch.Generator().manual_seed(dist.get_rank())
        ids = torch.randint(0, vocab_size(module), (batch_size, seq_len + 1), generator=generator)
        self.inputs, self.targets = ids[:, :-1], ids[:, 1:]
        self.steps: list[float] = []
        self.syncs: list[float] = []

    def step(self, device: torch.device, record: bool) -> None:
        synchronize(device)
        dist.barrier()
        start = time.perf_counter()
        self.optimizer.zero_grad()
        loss_fn(self.wrapped, self.inputs, self.targets).backward()
        sync_start = time.perf_counter()
        self.wrapped.finish_gradient_synchronization()
        synchronize(device)
        sync_end = time.perf_counter()
        self.optimizer.step()
        synchronize(device)
        if record:
            self.steps.append(time.perf_counter() - start)
            self.syncs.append(sync_end - sync_start)


def _slowest(value: float) -> float:
    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return max(values)


def _ddp_rank(configs: list[dict], batch_size: int, seq_len: int, warmup: int, rounds: int):
    """On every rank: ``warmup`` + ``rounds`` rounds of one step per configuration; rank 0
    returns the rows."""
    device = rank_device()
    trainers = [_Trainer(config, batch_size, seq_len) for config in configs]
    for round_ in range(warmup + rounds):
        shift = round_ % len(trainers)
        for trainer in trainers[shift:] + trainers[:shift]:
            trainer.step(device, record=round_ >= warmup)
    rows = []
    for config, trainer in zip(configs, trainers, strict=True):
        trained = [p for p in trainer.module.parameters() if p.requires_grad]
        rows.append({
            **config,
            "step_ms": _slowest(statistics.median(trainer.steps)) * 1e3,
            "sync_ms": _slowest(statistics.median(trainer.syncs)) * 1e3,
            "parameter_tensors": len(trained),
            "gradient_mb": sum(p.numel() * p.element_size() for p in trained) / 1e6,
            "buckets": len(getattr(trainer.wrapped, "buckets", [])) or "",
            "batch_per_rank": batch_size,
            "seq_len": seq_len,
            "rounds": rounds,
            "timing": TIMING,
        })  # fmt: skip
    return rows if dist.get_rank() == 0 else []


def ddp_configs(world_size: int, model: str, bucket_sizes_mb, torch_bucket_mb: float = 25):
    """The variants of notebook 07: none (compute only), naive, flat, overlapped, bucketed at
    each size, and PyTorch's DDP (its default 25 MiB buckets)."""
    fixed = [("none", 0), ("naive", 0), ("flat", 0), ("overlapped", 0)]
    bucketed = [("bucketed", size) for size in bucket_sizes_mb]
    return [
        {"world_size": world_size, "model": model, "variant": v, "bucket_size_mb": size}
        for v, size in [*fixed, *bucketed, ("torch", torch_bucket_mb)]
    ]


def ddp_sweep(
    path,
    configs: list[dict],
    *,
    batch_size: int,
    seq_len: int,
    warmup: int = 2,
    rounds: int = 10,
    resume: bool = True,
    metadata: dict | None = None,
    timeout_s: float = 600,
) -> pd.DataFrame:
    """Measure ``configs`` (``ddp_configs``) not yet in the Sweep CSV at ``path``, one launch
    per world size; a failed launch or a world size the machine cannot hold becomes "error"
    rows."""
    sweep = Sweep(
        path, SWEEP_KEY, metadata={**describe(resolve_device("auto")), **(metadata or {})}
    )
    todo = sweep.todo(configs, resume=resume)
    for world_size in dict.fromkeys(c["world_size"] for c in todo):
        group = [c for c in todo if c["world_size"] == world_size]
        try:
            check_world_size(world_size)
            args = (group, batch_size, seq_len, warmup, rounds)
            measured = launch(_ddp_rank, world_size, args, timeout_s=timeout_s)[0]
            rows = [{**row, "status": "ok", "error": ""} for row in measured]
        except (ValueError, RankError, TimeoutError) as error:
            rows = [{**c, "status": "error", "error": error_message(error)} for c in group]
        for row in rows:
            sweep.record(row)
    return sweep.select(configs)


def relative_to_naive(frame: pd.DataFrame) -> pd.DataFrame:
    """Add ``vs_naive`` (step time / naive's) and ``comm_share`` (1 - compute-only / step) per
    world size and model."""
    frame = frame.copy()
    keys = ["world_size", "model"]
    by_variant = frame.set_index([*keys, "variant"])["step_ms"]
    base = frame[keys].apply(tuple, axis=1)
    frame["vs_naive"] = frame["step_ms"] / [by_variant.get((*k, "naive")) for k in base]
    frame["comm_share"] = 1 - pd.Series([by_variant.get((*k, "none")) for k in base],
                                        index=frame.index) / frame["step_ms"]  # fmt: skip
    return frame
