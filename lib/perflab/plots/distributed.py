"""Figures of notebooks 07 and 08; each takes the DataFrame a library function returned."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure


def plot_allreduce(frame: pd.DataFrame) -> Figure:
    """Time and bus bandwidth of all-reduce against size, one line per world size."""
    ok = frame[frame["status"] == "ok"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    for ax, column, label in (
        (left, "time_ms", "time (ms)"),
        (right, "busbw_gbps", "bus bandwidth (GB/s)"),
    ):
        sns.lineplot(
            data=ok, x="size_mb", y=column, hue="world_size", marker="o", ax=ax, palette="viridis"
        )
        ax.set_xscale("log")
        ax.set_xlabel("all-reduce size (MB)")
        ax.set_ylabel(label)
    left.set_yscale("log")
    right.set_ylim(bottom=0)
    fig.suptitle("All-reduce of float32 tensors (slowest rank's median)")
    fig.tight_layout()
    return fig


def plot_ddp_steps(frame: pd.DataFrame) -> Figure:
    """Step time per variant, split into the compute-only step and the rest (communication
    not hidden)."""
    fig, ax = plt.subplots(figsize=(7, 3.5))
    labels = [
        f"{v}\n{s:g} MB" if v == "bucketed" else v
        for v, s in zip(frame["variant"], frame["bucket_size_mb"], strict=True)
    ]
    compute = frame["step_ms"] * (1 - frame["comm_share"])
    ax.bar(labels, compute, label="compute-only step")
    ax.bar(
        labels,
        frame["step_ms"] - compute,
        bottom=compute,
        label="the rest: communication not hidden",
    )
    ax.set_ylabel("step time (ms)")
    ax.set_title("Data-parallel step time, slowest rank's median")
    ax.tick_params(axis="x", labelsize=8)
    ax.legend()
    fig.tight_layout()
    return fig


def plot_bucket_sweep(frame: pd.DataFrame) -> Figure:
    """Bucketed step time against bucket size, with the other variants as horizontal lines."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bucketed = frame[frame["variant"] == "bucketed"]
    ax.plot(bucketed["bucket_size_mb"], bucketed["step_ms"], marker="o", label="bucketed")
    others = frame[frame["variant"] != "bucketed"]
    for (_, row), color in zip(
        others.iterrows(), sns.color_palette(n_colors=len(others)), strict=True
    ):
        ax.axhline(row["step_ms"], linestyle="--", color=color, label=row["variant"])
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("bucket size (MB)")
    ax.set_ylabel("step time (ms)")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


def plot_memory_per_rank(frame: pd.DataFrame) -> Figure:
    """Computed bytes per rank against world size for each strategy."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    data = frame.assign(MiB=frame["bytes"] / 2**20)
    sns.lineplot(data=data, x="world_size", y="MiB", hue="strategy", marker="o", ax=ax)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("params + grads + AdamW state per rank (MiB)")
    fig.tight_layout()
    return fig


def plot_max_devices(table: pd.DataFrame) -> Figure:
    """Largest compute-bound device count against global batch size, per strategy, one panel
    per model."""
    models = list(dict.fromkeys(table["model"]))
    fig, axes = plt.subplots(
        1, len(models), figsize=(4 * len(models), 3.5), sharey=True, squeeze=False
    )
    for ax, model in zip(axes[0], models, strict=True):
        sns.lineplot(
            data=table[table["model"] == model],
            x="batch_size",
            y="max_devices",
            hue="strategy",
            marker="o",
            ax=ax,
        )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_title(model)
        ax.set_xlabel("global batch (sequences)")
    axes[0][0].set_ylabel("largest compute-bound device count")
    fig.tight_layout()
    return fig


def plot_rank_timelines(
    timelines: pd.DataFrame,
    lanes: tuple[str, ...] = ("forward", "backward", "sync", "communication"),
    xlabel: str = "ms from the start of the step (rank 0)",
) -> Figure:
    """Rank 0's step per variant (``ddp_timelines``): forward, backward and the wait after it,
    and below them when collectives ran, one row of panels per variant on a shared time axis.
    Other profiled timelines (``fsdp_forward_timeline``) name their own ``lanes``; without a
    "variant" column they are one panel."""
    if "variant" not in timelines:
        timelines = timelines.assign(variant="")
    colours = dict(zip(lanes, sns.color_palette("colorblind", len(lanes)), strict=True))
    variants = list(dict.fromkeys(timelines["variant"]))
    fig, axes = plt.subplots(
        len(variants), 1, figsize=(9, 1.3 * len(variants) + 0.6), sharex=True, squeeze=False
    )
    for ax, variant in zip(axes[:, 0], variants, strict=True):
        rows = timelines[timelines["variant"] == variant]
        for y, lane in enumerate(lanes):
            spans = rows[rows["lane"] == lane]
            ax.broken_barh(
                list(zip(spans["start_ms"], spans["end_ms"] - spans["start_ms"], strict=True)),
                (y - 0.4, 0.8),
                color=colours[lane],
            )
        ax.set_yticks(range(len(lanes)), lanes)
        ax.invert_yaxis()
        ax.set_title(variant, fontsize=9, loc="left")
    axes[-1, 0].set_xlabel(xlabel)
    fig.tight_layout()
    return fig
