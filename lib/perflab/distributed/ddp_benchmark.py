"""Step time of each data-parallel variant (notebook 07), and the share spent communicating.

Every rank trains the same model on its own batch with AdamW; a step is zero_grad, forward,
backward, ``finish_gradient_synchronization()`` and the optimizer step. The row keeps the
slowest rank's median step. ``sync_ms`` is the time spent inside
``finish_gradient_synchronization`` (communication not hidden behind backward; PyTorch's DDP
hides it all inside backward, so it has none to show). The communication share is
``1 - compute-only step / step``, the compute-only step being the "none" variant (no
communication at all).
"""

from __future__ import annotations

import time

import pandas as pd
import torch
import torch.distributed as dist

from perflab.bench.sweep import Sweep
from perflab.bench.timer import time_fn
from perflab.device import describe, resolve_device
from perflab.distributed.ddp import make_data_parallel
from perflab.distributed.launch import rank_device
from perflab.distributed.sweeps import launch_sweep
from perflab.distributed.toy import build_model, loss_fn, vocab_size

SWEEP_KEY = ("world_size", "model", "variant", "bucket_size_mb")


def _slowest(value: float) -> float:
    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return max(values)


def _measure_step(config: dict, batch_size: int, seq_len: int, warmup: int, steps: int) -> dict:
    """On every rank: time ``steps`` training steps of ``config["variant"]``."""
    device = rank_device()
    module = build_model(config["model"], seed=0)
    wrapped = make_data_parallel(config["variant"], module, config["bucket_size_mb"])
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(dist.get_rank())
    ids = torch.randint(0, vocab_size(module), (batch_size, seq_len + 1), generator=generator)
    inputs, targets = ids[:, :-1].to(device), ids[:, 1:].to(device)
    sync_seconds: list[float] = []

    def step() -> None:
        optimizer.zero_grad()
        loss_fn(wrapped, inputs, targets).backward()
        start = time.perf_counter()
        wrapped.finish_gradient_synchronization()
        sync_seconds.append(time.perf_counter() - start)
        optimizer.step()

    timing = time_fn(step, warmup=warmup, steps=steps, device=device)
    trained = [p for p in module.parameters() if p.requires_grad]
    return {
        "step_ms": _slowest(timing.median) * 1e3,
        "sync_ms": _slowest(float(torch.tensor(sync_seconds[warmup:]).median())) * 1e3,
        "parameter_tensors": len(trained),
        "gradient_mb": sum(p.numel() * p.element_size() for p in trained) / 1e6,
        "buckets": len(getattr(wrapped, "buckets", [])) or "",
        "batch_per_rank": batch_size,
        "seq_len": seq_len,
        "steps": steps,
        "timing": "median step, slowest rank",
    }


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
    steps: int = 5,
    resume: bool = True,
) -> pd.DataFrame:
    """Measure ``configs`` (``ddp_configs``), rows appended to the Sweep CSV at ``path``."""
    sweep = Sweep(path, SWEEP_KEY, metadata=describe(resolve_device("auto")))
    args = (batch_size, seq_len, warmup, steps)
    return launch_sweep(sweep, configs, _measure_step, args, resume=resume, desc="DDP variants")


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
