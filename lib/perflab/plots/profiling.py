"""Figures of notebook 02; each takes a DataFrame a library function returned."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from perflab.measure.hotspots import CATEGORIES, short_name

_COLOURS = {
    "communication": "tab:red",
    "compute-bound": "tab:blue",
    "memory-bound": "tab:orange",
    "other": "tab:gray",
}


def plot_hotspots(hotspots: pd.DataFrame, top: int = 10, title: str = "") -> Figure:
    """Horizontal bars: the ``top`` names' share of the total time, coloured by category."""
    rows = hotspots.head(top).iloc[::-1]
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(rows) + 1))
    positions = range(len(rows))  # by position: truncated names may repeat
    ax.barh(positions, 100 * rows["share"], color=rows["category"].map(_COLOURS))
    ax.set_yticks(positions, rows["name"].map(lambda n: short_name(n, 50)))
    handles = [plt.Rectangle((0, 0), 1, 1, color=_COLOURS[c]) for c in CATEGORIES]
    ax.legend(handles, CATEGORIES, fontsize=8, loc="lower right")
    ax.set_xlabel(f"share of {hotspots['source'].iloc[0]} time (%)")
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_category_comparison(categories: pd.DataFrame, title: str = "") -> Figure:
    """Stacked bars of milliseconds per category, baseline next to optimized."""
    frame = categories.set_index("category")[["baseline_us", "optimized_us"]].T / 1e3
    frame.index = ["baseline", "optimized"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    frame.plot.bar(stacked=True, ax=ax, rot=0, color=[_COLOURS[c] for c in frame.columns])
    ax.set_ylabel("time (ms)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
