"""Where one training step spends its time and its memory (notebook 09, the baseline).

Time: the forward (with the loss), backward and optimizer phases of each step, measured
inside the step (``PhaseClock``: synchronised marks, so the phases add up to the step).
Memory: what the step holds after it ran, by category, each measured (the tensors' bytes)
next to its formula (parameters 4 P with P from the model's own count, gradients 4 P, AdamW's
moments 8 P and step counters 4 bytes per tensor, the logits B S V x 4), one block's saved
activations, then the most the forward and backward allocate above the parameters and the
optimizer state (the allocator's peak: activations, logits, gradients) and the optimizer
step's own temporaries. Copies: whether writing the causal mask into the scores in place,
instead of into a copy, changes the step (``compare_mask_copy``; notebook 02, section 8, finds
the copies).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
from torch.profiler import ProfilerActivity

from perflab.distributed.memory_per_rank import adamw_state_bytes, tensor_bytes
from perflab.implementations.attention.reference import attention_softmax, causal_mask, weighted_sum
from perflab.implementations.sharded_optimizer import optimizer_state_bytes
from perflab.measure.capture import profiling
from perflab.measure.comparison import Comparison, compare
from perflab.measure.stats import ROUNDS, is_unstable, median_interval
from perflab.measure.timeline import peak_memory
from perflab.measure.timer import PhaseClock, time_fn
from perflab.memory.saved import saved_bytes, saved_tensors
from perflab.profiling.copies import copy_sites
from perflab.training.ladder import BASELINE, TrainingStep

PHASES = ("forward", "backward", "optimizer")


def step_phases(run: TrainingStep, steps: int = 5, warmup: int = 1) -> pd.DataFrame:
    """Each phase's median time and median share of the step over ``steps`` timed steps, with
    the share's order-statistic interval and its level (5 steps give 93.7%), and whether the
    phase's times are ``unstable`` (``perflab.measure.stats``)."""
    clock = PhaseClock(run.device)
    for _ in range(warmup + steps):
        run.step(clock)
    timed = clock.last(steps)
    totals = np.array([sum(s.values()) for s in timed])
    rows = []
    for phase in PHASES:
        seconds = np.array([s[phase] for s in timed])
        shares = seconds / totals
        interval = median_interval(shares)
        rows.append(
            {
                "phase": phase,
                "median_ms": float(np.median(seconds)) * 1e3,
                "share": float(np.median(shares)),
                "share_ci_low": interval.low,
                "share_ci_high": interval.high,
                "share_ci_level": interval.level,
                "unstable": is_unstable(seconds),
            }
        )
    return pd.DataFrame(rows)


def step_memory(run: TrainingStep) -> pd.DataFrame:
    """Memory of ``run``'s step by category: measured, computed by its formula, and the
    formula in words. The step is run once first so that gradients and AdamW state exist."""
    run.step()
    model, config = run.model, run.model.config
    params = list(model.parameters())
    # the formula's count (perflab.implementations.model), not the tensors
    n = config.num_parameters()
    batch, seq_len = run.inputs.shape
    logits_bytes = batch * seq_len * config.vocab_size * 4
    block = model.blocks[0]
    x = torch.randn(batch, seq_len, config.d_model, device=run.device, requires_grad=True)
    block_saved = saved_bytes(saved_tensors(lambda: block(x), block.parameters()))
    with torch.no_grad():
        logits = model(run.inputs)
    model.zero_grad(set_to_none=True)  # backward makes them again, inside the recording
    backward_peak = peak_memory(run.loss_and_backward, run.device)
    optimizer_peak = peak_memory(run.optimizer.step, run.device)
    rows = [
        ("parameters", tensor_bytes(params), 4 * n, "4 P"),
        ("gradients", tensor_bytes(p.grad for p in params), 4 * n, "4 P"),
        (
            "AdamW state",
            optimizer_state_bytes(run.optimizer),
            adamw_state_bytes(n, len(params)),
            "8 P + 4 per tensor",
        ),
        ("saved activations, one block", block_saved, None, "measured (saved_tensors)"),
        ("logits", logits.numel() * logits.element_size(), logits_bytes, "B S V x 4"),
        (
            "forward + backward peak above parameters and state",
            backward_peak,
            None,
            "allocator peak",
        ),
        ("AdamW step's temporaries", optimizer_peak, None, "allocator peak"),
    ]
    return pd.DataFrame(rows, columns=["category", "measured_bytes", "formula_bytes", "formula"])


def batch_size_table(
    config, batch_sizes: list[int], seq_len: int, device: torch.device, *, steps: int = 3
) -> pd.DataFrame:
    """Tokens per second (median of ``steps`` timed steps after one untimed) and the peak of
    forward and backward above parameters and AdamW's state, for each batch size."""
    rows = []
    for batch_size in batch_sizes:
        run = TrainingStep(config, BASELINE, batch_size, seq_len, device)
        run.step()
        timing = time_fn(run.step, warmup=0, steps=steps, device=device)
        run.model.zero_grad(set_to_none=True)
        peak = peak_memory(run.loss_and_backward, device)
        rows.append(
            {
                "batch_size": batch_size,
                "tokens": batch_size * seq_len,
                "step_s": timing.median,
                "tokens_per_s": batch_size * seq_len / timing.median,
                "peak_bytes": peak,
            }
        )
    return pd.DataFrame(rows)


def accumulation_table(
    config,
    global_batch: int,
    micro_batch_counts: list[int],
    seq_len: int,
    device: torch.device,
    *,
    steps: int = 3,
) -> pd.DataFrame:
    """The same global batch as 1, 2, 4, ... micro-batches with gradient accumulation: time
    per optimizer step and the peak of forward and backward (activations shrink with the
    micro-batch; the gradients do not)."""
    run = TrainingStep(config, BASELINE, global_batch, seq_len, device)
    run.step()
    rows = []
    for count in micro_batch_counts:
        timing = time_fn(
            lambda count=count: run.step(micro_batches=count), warmup=0, steps=steps, device=device
        )
        run.model.zero_grad(set_to_none=True)
        peak = peak_memory(lambda count=count: run.loss_and_backward(micro_batches=count), device)
        rows.append(
            {
                "micro_batches": count,
                "micro_batch": global_batch // count,
                "step_s": timing.median,
                "peak_bytes": peak,
            }
        )
    return pd.DataFrame(rows)


def attention_masking_in_place(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False
) -> torch.Tensor:
    """``naive_attention`` with the causal mask written into the fresh scores
    (``masked_fill_``) instead of into a copy of them: the same numbers, one (n x n) copy per
    head and call fewer. Autograd allows it: the division before it keeps nothing of its
    output for backward, and softmax keeps its own output."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        scores.masked_fill_(~causal_mask(q.shape[-2], k.shape[-2], device=q.device), float("-inf"))
    return weighted_sum(attention_softmax(scores), v)


def step_copy_sites(config, batch_size: int, seq_len: int, device: torch.device) -> pd.DataFrame:
    """``copy_sites`` of one profiled training step of the baseline (naive attention, eager,
    for-loop AdamW), after a warm-up step (AdamW's state exists before the profiled one)."""
    run = TrainingStep(config, BASELINE, batch_size, seq_len, device)
    run.step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profiling(activities=activities) as profile:
        run.step()
    return copy_sites(profile)


def compare_mask_copy(
    config,
    batch_size: int,
    seq_len: int,
    device: torch.device,
    *,
    rounds: int = ROUNDS,
    warmup: int = 2,
    seed: int = 0,
) -> Comparison:
    """The baseline step against the same step whose attention masks in place
    (``attention_masking_in_place``), interleaved (ratio = in place / baseline), with whether
    the loss and every gradient are equal in its details (bit for bit: the same operations on
    the same numbers)."""
    runs = [TrainingStep(config, BASELINE, batch_size, seq_len, device, seed) for _ in range(2)]
    runs[1].model.set_attention(attention_masking_in_place)
    losses = [run.loss_and_backward() for run in runs]
    same = bool(torch.equal(*losses)) and all(
        torch.equal(a.grad, b.grad)
        for a, b in zip(runs[0].model.parameters(), runs[1].model.parameters(), strict=True)
    )
    result = compare(
        runs[0].step,
        runs[1].step,
        rounds=rounds,
        warmup=warmup,
        device=device,
        names=("masked_fill (a copy)", "masked_fill_ (in place)"),
    )
    return result.with_details(same_loss_and_gradients=same)
