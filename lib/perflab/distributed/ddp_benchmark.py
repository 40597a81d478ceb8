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

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
from torch import nn

from perflab.distributed.launch import rank_device
from perflab.distributed.launch_sweep import launch_sweep
from perflab.distributed.toy import loss_fn, toy_model, vocab_size
from perflab.implementations.ddp import make_data_parallel
from perflab.implementations.fsdp import FSDP
from perflab.implementations.sharded_optimizer import ShardedOptimizer
from perflab.measure.comparison import Comparison, paired_comparison
from perflab.measure.conclusions import Finding
from perflab.measure.device import describe, resolve_device, synchronize
from perflab.measure.stats import ROUNDS, least_squares
from perflab.measure.sweep import Sweep

SWEEP_KEY = ("world_size", "model", "variant", "bucket_size_mb")
#: The collectives of perflab's data-parallel variants and of ZeRO (``launch``'s placement).
DDP_COLLECTIVES = ("all_reduce", "broadcast")
TIMING = "median of interleaved steps (variants take turns), slowest rank"
LEARNING_RATE = 1e-4


@dataclass
class TrainingSetup:
    """One variant ready to train: the wrapped model, its optimizer, and what the step calls
    after backward and (if anything) before zeroing the gradients, each with the optimizer (the
    course's adapters' calling convention; perflab's wrappers ignore it)."""

    wrapped: nn.Module
    optimizer: torch.optim.Optimizer
    after_backward: Callable[[torch.optim.Optimizer], None]
    at_batch_start: Callable[[torch.optim.Optimizer], None] | None = None


def make_optimizer(name: str, params) -> torch.optim.Optimizer:
    """AdamW ("adamw"), or AdamW sharded across the ranks ("sharded-adamw", ZeRO stage 1)."""
    if name == "sharded-adamw":
        return ShardedOptimizer(params, torch.optim.AdamW, lr=LEARNING_RATE)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=LEARNING_RATE)
    raise ValueError(f"unknown optimizer {name!r}; valid: adamw, sharded-adamw")


def perflab_setup(config: dict, module: nn.Module) -> TrainingSetup:
    """perflab's variant ``config["variant"]`` (a ``make_data_parallel`` variant, or "fsdp")
    with ``make_optimizer(config["optimizer"])`` (default AdamW)."""
    if config["variant"] == "fsdp":
        wrapped = FSDP(module, prefetch=int(config.get("prefetch", 1)))
    else:
        wrapped = make_data_parallel(config["variant"], module, config["bucket_size_mb"])
    optimizer = make_optimizer(config.get("optimizer", "adamw"), wrapped.parameters())
    return TrainingSetup(wrapped, optimizer, lambda _: wrapped.finish_gradient_synchronization())


class _Trainer:
    """One variant's model, optimizer and batch; ``step()`` times its parts."""

    def __init__(self, config: dict, batch_size: int, seq_len: int, setup=perflab_setup):
        module = toy_model(config["model"], seed=0)
        self.module = module
        self.total_numel = sum(p.numel() for p in module.parameters())
        self.setup = setup(config, module)
        self.wrapped = self.setup.wrapped
        generator = torch.Generator().manual_seed(dist.get_rank())
        ids = torch.randint(0, vocab_size(module), (batch_size, seq_len + 1), generator=generator)
        self.inputs, self.targets = ids[:, :-1], ids[:, 1:]
        self.steps: list[float] = []
        self.syncs: list[float] = []
        # FSDP's prefetched gathers over the timed steps: pass -> [in time, prefetched]
        self.arrivals = {"forward": [0, 0], "backward": [0, 0]}

    def step(self, device: torch.device, record: bool) -> None:
        optimizer = self.setup.optimizer
        counted = getattr(self.wrapped, "arrivals", None)
        before = {k: list(v) for k, v in counted.items()} if isinstance(counted, dict) else None
        synchronize(device)
        dist.barrier()
        start = time.perf_counter()
        if self.setup.at_batch_start is not None:
            self.setup.at_batch_start(optimizer)
        optimizer.zero_grad()
        loss_fn(self.wrapped, self.inputs, self.targets).backward()
        sync_start = time.perf_counter()
        self.setup.after_backward(optimizer)
        synchronize(device)
        sync_end = time.perf_counter()
        optimizer.step()
        synchronize(device)
        if record:
            self.steps.append(time.perf_counter() - start)
            self.syncs.append(sync_end - sync_start)
            if before is not None:
                for phase, (ready, total) in before.items():
                    self.arrivals[phase][0] += counted[phase][0] - ready
                    self.arrivals[phase][1] += counted[phase][1] - total

    def arrival_columns(self) -> dict:
        """FSDP's prefetched gathers in the timed steps, by pass (rank 0's); {} for others."""
        if not hasattr(self.wrapped, "arrivals"):
            return {}
        return {
            f"{phase}_{name}": counts[index]
            for phase, counts in self.arrivals.items()
            for index, name in enumerate(("in_time", "prefetched"))
        }


def _bucket_count(wrapped: nn.Module) -> int | str:
    """How many buckets a bucketed wrapper made ("" for other wrappers, or buckets uncounted)."""
    try:
        return len(wrapped.buckets) or ""
    except (AttributeError, TypeError):
        return ""


def _slowest(values: list[float]) -> list[float]:
    """Per round, the slowest rank's time (a step takes as long as its slowest rank)."""
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, values)
    return [max(times) for times in zip(*gathered, strict=True)]


def _ddp_rank(
    configs: list[dict],
    batch_size: int,
    seq_len: int,
    warmup: int,
    rounds: int,
    setup=perflab_setup,
):
    """On every rank: ``warmup`` + ``rounds`` rounds of one step per configuration; rank 0
    returns the rows."""
    device = rank_device()
    trainers = [_Trainer(config, batch_size, seq_len, setup) for config in configs]
    for round_ in range(warmup + rounds):
        shift = round_ % len(trainers)
        for trainer in trainers[shift:] + trainers[:shift]:
            trainer.step(device, record=round_ >= warmup)
    rows = []
    for config, trainer in zip(configs, trainers, strict=True):
        trained = [p for p in trainer.module.parameters() if p.requires_grad]
        round_ms = [t * 1e3 for t in _slowest(trainer.steps)]
        rows.append(
            {
                **config,
                "step_ms": statistics.median(round_ms),
                "sync_ms": statistics.median(_slowest(trainer.syncs)) * 1e3,
                "round_ms": json.dumps(round_ms),
                "parameter_tensors": len(trained),
                "gradient_mb": sum(p.numel() * p.element_size() for p in trained) / 1e6,
                "buckets": _bucket_count(trainer.wrapped),
                # the share of the model's parameters each rank holds (FSDP: about 1 / world size)
                "held_fraction": sum(p.numel() for p in trainer.wrapped.parameters())
                / trainer.total_numel,
                **trainer.arrival_columns(),
                "batch_per_rank": batch_size,
                "seq_len": seq_len,
                "rounds": rounds,
                "timing": TIMING,
            }
        )
    return rows if dist.get_rank() == 0 else []


def ddp_configs(world_size: int, model: str, bucket_sizes_mb, torch_bucket_mb: float = 25):
    """The variants of notebook 07: none (compute only), naive, flat, individual (one
    overlapped all-reduce per parameter), bucketed at each size, and PyTorch's DDP (its
    default 25 MiB buckets)."""
    fixed = [("none", 0), ("naive", 0), ("flat", 0), ("individual", 0)]
    bucketed = [("bucketed", size) for size in bucket_sizes_mb]
    return [
        {"world_size": world_size, "model": model, "variant": v, "bucket_size_mb": size}
        for v, size in [*fixed, *bucketed, ("torch", torch_bucket_mb)]
    ]


ZERO_KEY = (*SWEEP_KEY, "optimizer")
PREFETCH_KEY = (*SWEEP_KEY, "prefetch")


def prefetch_configs(world_size: int, model: str, depths=(0, 1, 2)) -> list[dict]:
    """perflab's FSDP prefetching ``depths`` modules ahead (0: none; 1: the handout's rule; 2:
    a module earlier), in forward and backward, to take turns in one launch (notebook 08)."""
    return [
        {
            "world_size": world_size,
            "model": model,
            "variant": "fsdp",
            "bucket_size_mb": 0,
            "prefetch": depth,
        }
        for depth in depths
    ]


def zero_configs(world_size: int, model: str, variant: str = "flat") -> list[dict]:
    """The same data-parallel training with AdamW, and with AdamW sharded across the ranks
    (``ShardedOptimizer``, ZeRO stage 1), to take turns in one launch (notebook 08)."""
    return [
        {
            "world_size": world_size,
            "model": model,
            "variant": variant,
            "bucket_size_mb": 0,
            "optimizer": optimizer,
        }
        for optimizer in ("adamw", "sharded-adamw")
    ]


def ddp_sweep(
    path,
    configs: list[dict],
    *,
    batch_size: int,
    seq_len: int,
    warmup: int = 2,
    rounds: int = ROUNDS,
    resume: bool = True,
    metadata: dict | None = None,
    timeout_s: float = 600,
    key: tuple[str, ...] = SWEEP_KEY,
    setup: Callable[[dict, nn.Module], TrainingSetup] = perflab_setup,
) -> pd.DataFrame:
    """Measure ``configs`` (``ddp_configs``, or ``zero_configs``: then ``key=ZERO_KEY``) not
    yet in the Sweep CSV at ``path``, one launch per world size in which the configurations
    take turns; a failed launch or a world size the machine cannot hold becomes "error"
    rows. ``setup`` builds each configuration on every rank (a module-level function, as the
    ranks import it): ``perflab_setup``, or ``perflab.tools.adapters.timing.adapters_setup`` for
    a student's variants. Rows are keyed by ``key`` and the batch, sequence length and rounds
    they were measured at."""
    # A row stands for its batch, sequence length and rounds too: a resumed sweep measures
    # again what was measured at other settings.
    measured_at = {"batch_size": batch_size, "seq_len": seq_len, "rounds": rounds}
    configs = [{**config, **measured_at} for config in configs]
    key = (*key, *measured_at)
    sweep = Sweep(path, key, metadata={**describe(resolve_device("auto")), **(metadata or {})})
    args = (batch_size, seq_len, warmup, rounds, setup)
    # perflab's data-parallel variants and ZeRO only all-reduce and broadcast (Gloo runs both
    # on CUDA tensors); FSDP and a student's wrappers may call anything.
    own = setup is perflab_setup and all(c["variant"] != "fsdp" for c in configs)
    return launch_sweep(
        sweep,
        configs,
        _ddp_rank,
        args,
        resume=resume,
        timeout_s=timeout_s,
        together=True,
        collectives=DDP_COLLECTIVES if own else None,
    )


def relative_to_naive(frame: pd.DataFrame) -> pd.DataFrame:
    """Add ``vs_naive`` (step time / naive's) and ``comm_share`` (1 - compute-only / step) per
    world size and model."""
    frame = frame.copy()
    keys = ["world_size", "model"]
    by_variant = frame.set_index([*keys, "variant"])["step_ms"]
    base = frame[keys].apply(tuple, axis=1)
    frame["vs_naive"] = frame["step_ms"] / [by_variant.get((*k, "naive")) for k in base]
    frame["comm_share"] = (
        1
        - pd.Series([by_variant.get((*k, "none")) for k in base], index=frame.index)
        / frame["step_ms"]
    )
    return frame


def round_seconds(round_ms: str) -> list[float]:
    """A row's per-round step times (its ``round_ms``, JSON milliseconds) in seconds, the unit
    of a ``Comparison``'s times and medians."""
    return [ms / 1e3 for ms in json.loads(round_ms)]


def _measured(frame: pd.DataFrame) -> list[dict]:
    """The rows of a sweep whose step was measured (``status`` "ok"), as dicts, in order."""
    return [row for row in frame.to_dict("records") if row["status"] == "ok"]


def _variant_name(row: dict) -> str:
    """A row's variant, bucketed ones named with their size ("bucketed 1 MB")."""
    variant = row["variant"]
    return f"{variant} {row['bucket_size_mb']:g} MB" if variant.endswith("bucketed") else variant


def _rounds_by_name(rows: list[dict]) -> dict[str, list[float]]:
    """Each measured variant's per-round step times in seconds (rows as ``_measured`` reads
    them), by ``_variant_name``."""
    return {_variant_name(row): round_seconds(row["round_ms"]) for row in rows}


def ddp_comparisons(frame: pd.DataFrame, baseline: str = "naive") -> list[Comparison]:
    """Every variant's step against ``baseline``'s, paired by round (they took turns in the
    same launch), bucketed ones named with their size."""
    rounds = _rounds_by_name(_measured(frame))
    return [_paired(rounds, baseline, variant) for variant in rounds if variant != baseline]


def ddp_comparison(frame: pd.DataFrame, baseline: str, variant: str) -> Comparison:
    """``variant``'s step against ``baseline``'s (names as ``ddp_comparisons`` gives them),
    paired by round."""
    return _paired(_rounds_by_name(_measured(frame)), baseline, variant)


def _paired(rounds: dict[str, list[float]], baseline: str, variant: str) -> Comparison:
    """``variant``'s step times against ``baseline``'s, paired by round (``rounds``: each
    variant's times, round by round, as ``_rounds_by_name`` reads them); a variant with no rows
    is a one-line error naming the variants there are."""
    for name in (baseline, variant):
        if name not in rounds:
            raise ValueError(f"no {name!r} rows to compare; variants: {', '.join(rounds)}")
    return paired_comparison(rounds[baseline], rounds[variant], names=(baseline, variant))


def ddp_findings(frame: pd.DataFrame) -> list[Finding]:
    """Notebook 07's conclusions from its step sweep, each a comparison paired by round: the
    compute-only step and the fastest bucket size against naive data parallelism, the fastest
    bucket size against PyTorch's DDP and against the next size, two sizes that both make one
    bucket (the same plan measured twice: an A/A noise yardstick), and each of a student's
    wrappers against PyTorch's DDP and perflab's fastest bucketed one."""

    ok = _measured(frame)
    rounds = _rounds_by_name(ok)  # once: every finding pairs two of them

    def finding(key: str, baseline: str, variant: str, prefix: str = "") -> Finding:
        result = _paired(rounds, baseline, variant)
        return Finding(key, prefix + result.sentence(), result)

    bucketed = sorted(
        (row for row in ok if row["variant"] == "bucketed"), key=itemgetter("step_ms")
    )
    findings = [finding("none vs naive", "naive", "none")]
    if not bucketed:
        return findings
    sizes = [_variant_name(row) for row in bucketed]
    findings.append(finding("bucketed vs naive", "naive", sizes[0]))
    if any(row["variant"] == "torch" for row in ok):
        findings.append(finding("bucketed vs torch DDP", "torch", sizes[0]))
    if len(sizes) > 1:
        findings.append(
            finding(
                "fastest bucket size",
                sizes[0],
                sizes[1],
                f"fastest bucket size by median: {sizes[0]}; against the next, {sizes[1]}: ",
            )
        )
    one = sorted((row for row in bucketed if row["buckets"] == 1), key=itemgetter("bucket_size_mb"))
    if len(one) > 1:
        first, second = (_variant_name(row) for row in one[:2])
        findings.append(
            finding(
                "noise yardstick (A/A)",
                first,
                second,
                f"{first} and {second} give the same single bucket: ",
            )
        )
    for row in ok:
        if row["variant"].startswith("yours"):
            name = _variant_name(row)
            findings += [finding(f"{name} vs {base}", base, name) for base in ("torch", sizes[0])]
    return findings


def fit_bucket_overhead(frame: pd.DataFrame) -> dict:
    """The 2025 handout's model of bucketed DDP's overhead (time after backward ends), fitted
    to the measured ``sync_ms`` of the bucketed rows.

    With n_b buckets of s/n_b bytes, an all-reduce costs o + s/(n_b w). If computing a bucket's
    gradients takes as long as sending them, only the per-call cost o is not hidden, and it
    piles up bucket after bucket, while the last bucket is always sent after backward:
    overhead(n_b) = n_b o + s/(n_b w), smallest at n_b* = sqrt(s/(w o)), a bucket size of
    b* = s/n_b* = sqrt(s w o). Least squares on (n_b, 1/n_b) gives o and s/w; ``valid`` needs
    both positive and at least three distinct bucket counts (two parameters, one check). The
    model assumes equal buckets; buckets filled in parameter order are not (a large embedding
    can be a bucket of its own), which biases o."""
    ok = frame[(frame["status"] == "ok") & (frame["variant"] == "bucketed")]
    buckets = pd.to_numeric(ok["buckets"]).to_numpy(float)
    seconds = ok["sync_ms"].to_numpy(float) / 1e3
    (per_call, s_over_w), r2 = least_squares([buckets, 1 / buckets], seconds)
    s = float(ok["gradient_mb"].iloc[0]) * 1e6
    fit = {
        "points": len(ok),
        "distinct_bucket_counts": len(set(buckets)),
        "per_call_ms": float(per_call) * 1e3,
        "s_over_w_ms": float(s_over_w) * 1e3,
        "gradient_bytes": s,
        "r2": float(r2),
        "valid": bool(per_call > 0 and s_over_w > 0 and len(set(buckets)) >= 3),
    }
    if fit["valid"]:
        w = s / s_over_w
        fit.update(
            w_gbps=float(w) / 1e9,
            best_buckets=float(np.sqrt(s / (w * per_call))),
            best_bucket_mb=float(np.sqrt(s * w * per_call)) / 1e6,
        )
    return fit
