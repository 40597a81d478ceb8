"""Figures of notebook 10; each takes the DataFrame a ``perflab.lessons.nb10_decoding.measurements``
function returned."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from perflab.measure.stats import level_text


def plot_decode_roofline(table: pd.DataFrame, device: str) -> Figure:
    """Measured decode tokens/s against batch size, one line per ``step`` (eager, compiled)
    where the table has that column (the median's interval as error bars, at the level in
    ``median_ci_level`` where the table has it), beside the memory-bandwidth bound, the
    compute bound and the roofline (the lower of the two). Points whose timing is unstable
    (``unstable``) are drawn hollow."""
    fig, ax = plt.subplots(figsize=(6, 3.8))
    bounds = table.drop_duplicates("batch").sort_values("batch")
    ax.plot(
        bounds["batch"],
        bounds["memory_bound_tokens_per_s"],
        "--",
        color="tab:orange",
        label="memory bound: batch x bandwidth / bytes per step",
    )
    ax.plot(
        bounds["batch"],
        bounds["compute_bound_tokens_per_s"],
        ":",
        color="tab:red",
        label="compute bound: peak / FLOPs per token",
    )
    ax.plot(
        bounds["batch"],
        bounds["roofline_tokens_per_s"],
        "-",
        color="gray",
        alpha=0.5,
        linewidth=4,
        label="roofline",
    )
    if "median_ci_level" in table.columns:
        levels = sorted({level_text(level) for level in table["median_ci_level"]})
        interval = f" ({', '.join(levels)} CI of the median)"
    else:
        interval = ""
    steps = table.groupby("step", sort=False) if "step" in table.columns else [("", table)]
    flags = table["unstable"] if "unstable" in table.columns else pd.Series(False, table.index)
    unstable_all = flags.astype(str).str.lower() == "true"  # bools, or strings read from a CSV
    for (name, rows), color in zip(steps, ("tab:blue", "tab:green", "tab:purple"), strict=False):
        batch, measured = rows["batch"], rows["tokens_per_s"]
        errors = [measured - rows["tokens_per_s_low"], rows["tokens_per_s_high"] - measured]
        label = f"measured{', ' + name if name else ''}{interval}"
        ax.errorbar(batch, measured, yerr=errors, fmt="-", color=color, capsize=3, label=label)
        unstable = unstable_all[rows.index]
        ax.plot(batch[~unstable], measured[~unstable], "o", color=color)
        if unstable.any():
            ax.plot(batch[unstable], measured[unstable], "o", color=color, markerfacecolor="white")
    if unstable_all.any():
        ax.plot([], [], "o", color="gray", markerfacecolor="white", label="unstable (hollow)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequences decoded together (batch)")
    ax.set_ylabel("generated tokens / s")
    ax.set_title(f"Decode throughput and its roofline ({device})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_kv_memory(table: pd.DataFrame) -> Figure:
    """KV memory of each cache (bars, MiB) and the most bytes that held tokens at once (line)."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = [
        c if pd.isna(b) else f"{c}, block {int(b)}"
        for c, b in zip(table["cache"], table["block_size"], strict=True)
    ]
    ax.bar(labels, table["kv_bytes"] / 2**20, color="tab:blue", label="KV memory held")
    ax.axhline(
        table["peak_token_bytes"].iloc[0] / 2**20,
        color="black",
        linestyle="--",
        label="bytes of tokens at the peak",
    )
    ax.set_ylabel("MiB")
    ax.set_title("KV memory for one batch of unequal requests")
    ax.tick_params(axis="x", rotation=20)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
