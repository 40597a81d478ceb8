"""Controls for exploring without measuring again (notebooks 01 and 08): ipywidgets that
recompute a table from saved results or from formulas when a value changes.

Each control is an ``ipywidgets.interactive``: in JupyterLab its table follows the sliders and
menus. Without a front end (papermill, nbval), widgets draw nothing, so the notebooks also show
``control.result``, the table of the default state, as a plain output.
"""

from __future__ import annotations

import ipywidgets as widgets
import pandas as pd

from perflab.distributed.calculators import (
    H100_NODE,
    STRATEGIES,
    Hardware,
    Workload,
    max_compute_bound_devices,
)
from perflab.model import PRESETS, get_preset

ALL = "(all)"


def max_devices_at(preset: str, batch_size: int, seq_len: int, tflops: float,
                   bandwidth_gb_s: float, tp_bandwidth_gb_s: float) -> pd.DataFrame:  # fmt: skip
    """The largest compute-bound device count of each strategy for one model, batch and
    device (dense TFLOP/s, data-parallel and tensor-parallel link bandwidths in GB/s)."""
    hardware = Hardware("custom", tflops * 1e12, bandwidth_gb_s * 1e9, tp_bandwidth_gb_s * 1e9)
    work = Workload.from_config(get_preset(preset), batch_size, seq_len)
    rows = [{"strategy": s, "max_devices": max_compute_bound_devices(s, work, hardware)}
            for s in STRATEGIES]  # fmt: skip
    return pd.DataFrame(rows)


def calculator_controls(preset: str = "xl", batch_size: int = 256, seq_len: int = 1024,
                        hardware: Hardware = H100_NODE) -> widgets.interactive:  # fmt: skip
    """Sliders over notebook 08's calculator: model, global batch, sequence length, device
    FLOP/s and the two link bandwidths -> the largest compute-bound device count per
    strategy."""
    get_preset(preset)  # a clear error for an unknown name
    powers = [2**i for i in range(15)]
    if batch_size not in powers:
        raise ValueError(
            f"batch_size must be a power of 2 from 1 to {powers[-1]}, got {batch_size}"
        )
    return widgets.interactive(
        max_devices_at,
        preset=widgets.Dropdown(options=list(PRESETS), value=preset, description="model"),
        batch_size=widgets.SelectionSlider(options=powers, value=batch_size,
                                           description="batch"),
        seq_len=widgets.SelectionSlider(options=[2**i for i in range(7, 16)], value=seq_len,
                                        description="tokens/seq"),
        tflops=widgets.FloatLogSlider(value=hardware.flops_per_s / 1e12, base=10, min=1, max=4,
                                      description="TFLOP/s"),
        bandwidth_gb_s=widgets.FloatLogSlider(value=hardware.bandwidth / 1e9, base=10, min=0,
                                              max=3, description="DP GB/s"),
        tp_bandwidth_gb_s=widgets.FloatLogSlider(value=hardware.tp_bandwidth / 1e9, base=10,
                                                 min=1, max=4, description="TP GB/s"),
    )  # fmt: skip


def filter_rows(table: pd.DataFrame, **chosen: object) -> pd.DataFrame:
    """The rows of ``table`` whose columns have the chosen values (``ALL``: any)."""
    for column, value in chosen.items():
        if column not in table:
            raise ValueError(f"no column {column!r}; valid: {', '.join(table.columns)}")
        if value != ALL:
            table = table[table[column].astype(str) == str(value)]
    return table


def results_explorer(table: pd.DataFrame, filters: list[str], columns: list[str],
                     defaults: dict | None = None,
                     plot: tuple[str, str] | None = None) -> widgets.interactive:  # fmt: skip
    """A menu per column of ``filters`` (its values, or ``ALL``) over a saved sweep
    (``table``, read from its CSV): the matching rows' ``filters`` and ``columns``, and with
    ``plot = (x, y)`` a figure of y against x of those rows (in the widget only). Nothing is
    measured again."""
    missing = [c for c in [*filters, *columns, *(plot or ())] if c not in table]
    if missing:
        raise ValueError(f"no column {', '.join(missing)}; valid: {', '.join(table.columns)}")
    defaults = defaults or {}
    menus = {
        column: widgets.Dropdown(options=[ALL, *sorted(table[column].astype(str).unique())],
                                 value=str(defaults.get(column, ALL)), description=column)
        for column in filters
    }  # fmt: skip

    def show(**chosen: object) -> pd.DataFrame:
        rows = filter_rows(table, **chosen)[[*filters, *columns]].reset_index(drop=True)
        if plot and not rows.empty:
            import matplotlib.pyplot as plt

            x, y = plot
            fig, ax = plt.subplots(figsize=(5, 3))
            ax.plot(rows[x], rows[y], "o")
            ax.set_xlabel(x)
            ax.set_ylabel(y)
            plt.show()
        return rows

    return widgets.interactive(show, **menus)
