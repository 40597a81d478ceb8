"""A trace of the workbook's training step (notebook 02), and its attention ranges against their
FLOPs.

The step is ``perflab.bench.steps.build_step``'s, with its "step", "forward", "backward" and
"optimizer" ranges; the model's attention can be swapped for the annotated one (ranges for
scores, softmax and weighted sum) or for PyTorch's fused ``scaled_dot_product_attention``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch.nn.functional as F

from perflab.bench.steps import BenchConfig, build_step
from perflab.implementations.attention import annotated_attention, naive_attention
from perflab.implementations.attention.annotated import ATTENTION_RANGES, attention_part_flops
from perflab.measure.capture import record_trace
from perflab.measure.device import resolve_device
from perflab.measure.summary import range_totals
from perflab.measure.trace import Trace

ATTENTIONS = {
    "naive": naive_attention,
    "annotated": annotated_attention,
    "sdpa": F.scaled_dot_product_attention,
}


def record_step_trace(
    path: str | Path, config: BenchConfig, attention: str = "annotated", seed: int = 0
) -> Path:
    """Profile ``config.steps`` steps of ``config`` after ``config.warmup`` unprofiled ones,
    with one of ``ATTENTIONS``; write the trace to ``path`` (gzipped when it ends in .gz) and
    return the path."""
    if attention not in ATTENTIONS:
        raise ValueError(f"unknown attention {attention!r}; valid: {', '.join(ATTENTIONS)}")
    device = resolve_device(config.device)
    step = build_step(config, device, seed=seed, attention_fn=ATTENTIONS[attention])
    return record_trace(step, path, device, warmup=config.warmup, steps=config.steps)


def attention_time_vs_flops(
    trace: Trace, batch_size: int, num_heads: int, seq_len: int, head_dim: int
) -> pd.DataFrame:
    """Time and FLOPs of the three annotated attention parts (``annotated_attention``'s ranges).

    FLOPs per call for (batch x heads) rows of seq_len x seq_len scores: scores and weighted
    sum 2*T*T*d each; softmax about 5*T*T (max, subtract, exp, sum, divide). Softmax does
    ~2.5/d of a matmul's arithmetic but reads and writes the whole score matrix, so its share of
    the time is far above its share of the FLOPs wherever memory traffic bounds it.
    """
    table = range_totals(trace, ATTENTION_RANGES)
    if (table["instances"] == 0).any():
        missing = ", ".join(table.loc[table["instances"] == 0, "range"])
        raise ValueError(
            f"{trace.path.name} lacks the attention ranges {missing}; "
            "record it with attention='annotated'"
        )
    flops = attention_part_flops(batch_size, num_heads, seq_len, seq_len, head_dim)
    table["flops"] = table["range"].map(flops) * table["instances"]
    table["time_share"] = table["total_us"] / table["total_us"].sum()
    table["flop_share"] = table["flops"] / table["flops"].sum()
    table["gflops_per_s"] = table["flops"] / (table["total_us"] * 1e3)
    return table
