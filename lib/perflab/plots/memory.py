"""Figures of notebook 04; each takes data a library function returned."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from perflab.measure.timeline import MemoryTimeline


def plot_timelines(timelines: dict[str, MemoryTimeline]) -> Figure:
    """Allocated MB against time, one panel per recorded timeline, the peak marked."""
    fig, axes = plt.subplots(1, len(timelines), figsize=(5 * len(timelines), 3.2), squeeze=False)
    for ax, (name, timeline) in zip(axes[0], timelines.items(), strict=True):
        events = timeline.events
        ax.step(events["time_ms"], events["allocated_bytes"] / 2**20, where="post")
        ax.axhline(timeline.peak_bytes / 2**20, color="tab:red", linewidth=0.8, linestyle="--")
        ax.set_title(f"{name}: peak {timeline.peak_bytes / 2**20:.1f} MiB", fontsize=10)
        ax.set_xlabel("time (ms)")
        ax.set_ylabel("allocated since start (MiB)")
    fig.tight_layout()
    return fig


def plot_group_sweep(sweep: pd.DataFrame, sqrt_layers: float, predicted: float) -> Figure:
    """Peak MiB against checkpoint group size, with sqrt(L) and the cost model's optimum."""
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(sweep["group_size"], sweep["peak_bytes"] / 2**20, marker="o")
    ax.axvline(sqrt_layers, color="gray", linestyle=":", label="sqrt(L)")
    ax.axvline(predicted, color="tab:green", linestyle="--", label="cost-model optimum")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("blocks per checkpoint (group size)")
    ax.set_ylabel("peak activation memory (MiB)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_depth(depth: pd.DataFrame) -> Figure:
    """Peak MiB against depth (log2 axis) for each strategy."""
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for strategy, rows in depth.groupby("strategy", sort=False):
        ax.plot(rows["layers"], rows["peak_bytes"] / 2**20, marker="o", label=strategy)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("layers")
    ax.set_ylabel("peak activation memory (MiB)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
