"""Figures of notebooks 01, 05 and 06; each takes the DataFrame a library function returned."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from perflab.measure.stats import level_text


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


def plot_attention_sweep(
    rows: pd.DataFrame, columns: dict[str, str], hue: str, style: str
) -> Figure:
    """One panel per column (title: its label) against sequence length, log-log, for the
    attention sweeps of notebooks 05 and 06; rows that did not run ("oom", "error") left out.
    A time whose row flags it unstable (``forward_unstable`` beside ``forward_s``) is circled
    by a hollow marker: read it with care, no conclusion is drawn from it."""
    ok = rows[rows["status"] == "ok"] if "status" in rows else rows
    fig, axes = plt.subplots(1, len(columns), figsize=(5 * len(columns), 3.5), squeeze=False)
    for ax, (column, label) in zip(axes[0], columns.items(), strict=True):
        sns.lineplot(data=ok, x="seq_len", y=column, hue=hue, style=style, marker="o", ax=ax)
        flag = column.removesuffix("_s") + "_unstable"
        if flag in ok:
            shaky = ok[ok[flag].astype(str).str.lower() == "true"]
            if len(shaky):
                ax.scatter(
                    shaky["seq_len"],
                    shaky[column],
                    s=120,
                    facecolors="none",
                    edgecolors="black",
                    zorder=3,
                    label="unstable (IQR > 25%)",
                )
                ax.legend(fontsize=7)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(label)
    fig.tight_layout()
    return fig


def plot_comparisons(table: pd.DataFrame, x: str, title: str) -> Figure:
    """Bars of time b / time a (``Comparison.as_row`` rows) with their intervals as error bars
    (each at the confidence in its row), the ±noise band shaded around 1: a filled bar is a
    verdict (faster, slower, same), a hollow hatched one is inconclusive."""
    fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(table)), 3.5))
    ratio = table["ratio_b_over_a"]
    errors = [ratio - table["ci_low"], table["ci_high"] - ratio]
    conclusive = (table["verdict"] != "inconclusive") if "verdict" in table else True
    bars = ax.bar(table[x].astype(str), ratio, yerr=errors, capsize=4, color="tab:blue")
    for bar, solid in zip(bars, pd.Series(conclusive, index=table.index), strict=True):
        if not solid:
            bar.set(facecolor="none", edgecolor="tab:blue", hatch="//")
    if "confidence" in table:
        levels = sorted({level_text(c) for c in table["confidence"]})
        ax.set_xlabel(f"{x} (intervals: {', '.join(levels)} confidence; hatched: inconclusive)")
    band = float(table["noise_band"].iloc[0])
    ax.axhspan(1 - band, 1 + band, color="gray", alpha=0.3, label=f"noise band ±{band:.0%}")
    ax.axhline(1.0, color="gray", linewidth=1)
    ax.set_ylabel(f"time of {table['b'].iloc[0]} / {table['a'].iloc[0]}")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
