"""Figures of notebook 01; each takes the DataFrame a library function returned."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure


def plot_phases(breakdown: pd.DataFrame) -> Figure:
    """Stacked bars: forward, backward and optimizer seconds per preset."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    phases = breakdown.set_index("preset")[["forward_s", "backward_s", "optimizer_s"]]
    (phases.clip(lower=0) * 1e3).rename(columns=lambda c: c.removesuffix("_s")).plot.bar(
        stacked=True, ax=ax, rot=0
    )
    ax.set_ylabel("mean time per step (ms)")
    ax.set_title("Where a training step's time goes")
    fig.tight_layout()
    return fig


def plot_warmup(samples: pd.DataFrame) -> Figure:
    """Time of every timed step after 0, 1, 2, 5 ... warm-up steps."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    data = samples.assign(ms=samples["seconds"] * 1e3)
    sns.lineplot(data=data, x="step", y="ms", hue="warmup", marker="o", ax=ax, palette="viridis")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("timed step (after the warm-up steps)")
    ax.set_ylabel("step time (ms)")
    ax.set_title("Each warm-up setting in a fresh process")
    fig.tight_layout()
    return fig
