"""Notebook 04's activation-checkpointing study: peak memory and time of forward + backward
through a stack of blocks, over group sizes (single level) and over depths (none vs nested).

Cost model of single-level checkpointing with groups of g blocks out of L: the peak holds L/g
group inputs of b bytes (the residual stream) plus one group's activations, g blocks of A bytes
each, so peak(g) ~ (L/g)·b + g·A, smallest at g* = sqrt(L·b/A). Chen et al. 2016's sqrt(L) is
the case A = b.
"""

from __future__ import annotations

import math

import pandas as pd
import torch

from perflab.implementations.checkpointing import check_strategy
from perflab.lessons.nb04_memory.step_memory import (
    block_stack,
    blocks_fwd_bwd,
    checkpoint_peak,
    group_sizes,
    nearest_grid_point,
)
from perflab.measure.comparison import Comparison, compare
from perflab.measure.stats import ROUNDS


def group_size_sweep(
    preset: str, num_layers: int, batch_size: int, seq_len: int, device: torch.device
) -> pd.DataFrame:
    """Single-level checkpointing of ``num_layers`` blocks, every group size that divides
    the stack: group_size, peak_bytes, seconds."""
    rows = [
        {
            "group_size": g,
            **checkpoint_peak(preset, num_layers, batch_size, seq_len, "single", g, device),
        }
        for g in group_sizes(num_layers)
    ]
    return pd.DataFrame(rows)


def depth_sweep(
    preset: str,
    layer_counts: list[int],
    batch_size: int,
    seq_len: int,
    device: torch.device,
    strategies=("none", "nested"),
) -> pd.DataFrame:
    """Each depth with each strategy: layers, strategy, peak_bytes, seconds."""
    rows = [
        {
            "layers": n,
            "strategy": strategy,
            **checkpoint_peak(preset, n, batch_size, seq_len, strategy, device=device),
        }
        for n in layer_counts
        for strategy in strategies
    ]
    return pd.DataFrame(rows)


def best_group_size(groups: pd.DataFrame, residual_bytes: int, block_bytes: int) -> dict:
    """The measured best group size against sqrt(L) and the cost model's sqrt(L·b/A), each
    also as the nearest group size on the grid and its distance in grid steps."""
    grid = list(groups["group_size"])
    num_layers = max(grid)
    best = int(groups.loc[groups["peak_bytes"].idxmin(), "group_size"])
    sqrt_layers = math.sqrt(num_layers)
    model_optimum = math.sqrt(num_layers * residual_bytes / block_bytes)
    near_sqrt = nearest_grid_point(sqrt_layers, grid)
    near_model = nearest_grid_point(model_optimum, grid)
    return {
        "layers": num_layers,
        "best": best,
        "sqrt_layers": sqrt_layers,
        "nearest_to_sqrt": near_sqrt,
        "steps_from_sqrt": abs(grid.index(best) - grid.index(near_sqrt)),
        "model_optimum": model_optimum,
        "nearest_to_model": near_model,
        "steps_from_model": abs(grid.index(best) - grid.index(near_model)),
    }


def compare_checkpointing(
    preset: str,
    num_layers: int,
    batch_size: int,
    seq_len: int,
    strategy: str,
    group_size: int | None,
    device: torch.device,
    *,
    rounds: int = ROUNDS,
    warmup: int = 1,
) -> Comparison:
    """What recomputation costs: forward + backward through the same ``num_layers`` blocks
    without checkpointing (a) and with ``strategy`` (b), interleaved by
    ``perflab.bench.compare``."""
    check_strategy(strategy, group_size, num_layers)
    model, x = block_stack(preset, num_layers, batch_size, seq_len, device)
    label = strategy + (f" g={group_size}" if strategy == "single" else "")
    return compare(
        lambda: blocks_fwd_bwd(model, x, "none", None),
        lambda: blocks_fwd_bwd(model, x, strategy, group_size),
        rounds=rounds,
        warmup=warmup,
        device=device,
        names=("no checkpointing", label),
    )


def checkpointing_costs(
    preset: str,
    layers: int,
    group_size: int,
    deepest_layers: int,
    batch_size: int,
    seq_len: int,
    device: torch.device,
    *,
    rounds: int = ROUNDS,
) -> list[Comparison]:
    """What recomputation costs, two ways (``compare_checkpointing``): single level with
    ``group_size`` at ``layers`` blocks, and nested at ``deepest_layers``, each labelled with
    its ``case``."""
    cases = [
        (f"single g={group_size}, L={layers}", layers, "single", group_size),
        (f"nested, L={deepest_layers}", deepest_layers, "nested", None),
    ]
    return [
        compare_checkpointing(
            preset, n, batch_size, seq_len, strategy, g, device, rounds=rounds
        ).with_labels(case=case)
        for case, n, strategy, g in cases
    ]


def modelled_group_peaks(
    num_layers: int, residual_bytes: float, block_bytes: float
) -> pd.DataFrame:
    """The cost model's activation peak for every group size g dividing ``num_layers``:
    (L/g) group inputs of ``residual_bytes`` plus one group's activations, g blocks of
    ``block_bytes`` (for sizes that cannot be measured here, e.g. xl at context 2048)."""
    sizes = [g for g in range(1, num_layers + 1) if num_layers % g == 0]
    return pd.DataFrame(
        {
            "group_size": sizes,
            "peak_bytes": [num_layers // g * residual_bytes + g * block_bytes for g in sizes],
        }
    )
