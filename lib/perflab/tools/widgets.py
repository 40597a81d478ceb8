"""Controls for exploring (notebooks 01 and 08): ipywidgets that recompute a table from saved
results or from formulas when a value changes, and one that measures a chosen configuration
when asked.

Each control is an ``ipywidgets.interactive``: in JupyterLab its table follows the sliders and
menus. Without a front end (papermill, nbval), widgets draw nothing, so the notebooks also show
the table of the default state (``control.result``, or ``MeasureNow.planned()``) as a plain
output.
"""

from __future__ import annotations

import dataclasses
import math

import ipywidgets as widgets
import pandas as pd

from perflab.bench.steps import MODEL_FIELDS, MODES, BenchConfig, benchmark_sweep
from perflab.distributed.calculators import (
    H100_NODE,
    STRATEGIES,
    Hardware,
    Workload,
    max_compute_bound_devices,
)
from perflab.implementations.model import PRESETS, get_preset
from perflab.measure.device import DTYPES
from perflab.measure.tables import timing_table

ALL = "(all)"
#: Options of ``interactive``: show the function's returned table in the widget's output.
SHOW_RESULT = {"auto_display": True}


def max_devices_at(
    preset: str,
    batch_size: int,
    seq_len: int,
    tflops: float,
    bandwidth_gb_s: float,
    tp_bandwidth_gb_s: float,
) -> pd.DataFrame:
    """The largest compute-bound device count of each strategy for one model, batch and
    device (dense TFLOP/s, data-parallel and tensor-parallel link bandwidths in GB/s)."""
    hardware = Hardware("custom", tflops * 1e12, bandwidth_gb_s * 1e9, tp_bandwidth_gb_s * 1e9)
    work = Workload.from_config(get_preset(preset), batch_size, seq_len)
    rows = [
        {"strategy": s, "max_devices": max_compute_bound_devices(s, work, hardware)}
        for s in STRATEGIES
    ]
    return pd.DataFrame(rows)


def calculator_controls(
    preset: str = "xl", batch_size: int = 256, seq_len: int = 1024, hardware: Hardware = H100_NODE
) -> widgets.interactive:
    """Sliders over notebook 08's calculator: model, global batch, sequence length, device
    FLOP/s and the two link bandwidths -> the largest compute-bound device count per
    strategy. Each slider's range reaches the value given (never clamped to a default range:
    0.5 TFLOP/s stays 0.5); a non-positive rate or bandwidth is refused in one line."""
    get_preset(preset)  # a clear error for an unknown name
    for name, value in (
        ("flops_per_s", hardware.flops_per_s),
        ("bandwidth", hardware.bandwidth),
        ("tp_bandwidth", hardware.tp_bandwidth),
    ):
        if not value > 0:
            raise ValueError(f"hardware.{name} must be positive, got {value!r}")
    powers = [2**i for i in range(15)]
    if batch_size not in powers:
        raise ValueError(
            f"batch_size must be a power of 2 from 1 to {powers[-1]}, got {batch_size}"
        )
    return widgets.interactive(
        max_devices_at,
        SHOW_RESULT,
        preset=widgets.Dropdown(options=list(PRESETS), value=preset, description="model"),
        batch_size=widgets.SelectionSlider(options=powers, value=batch_size, description="batch"),
        seq_len=widgets.SelectionSlider(
            options=sorted({*(2**i for i in range(7, 16)), seq_len}),
            value=seq_len,
            description="tokens/seq",
        ),
        tflops=_log_slider(hardware.flops_per_s / 1e12, 1, 4, "TFLOP/s"),
        bandwidth_gb_s=_log_slider(hardware.bandwidth / 1e9, 0, 3, "DP GB/s"),
        tp_bandwidth_gb_s=_log_slider(hardware.tp_bandwidth / 1e9, 1, 4, "TP GB/s"),
    )


def _log_slider(value: float, low: int, high: int, description: str) -> widgets.FloatLogSlider:
    """A base-10 log slider from 10^low to 10^high, widened to hold ``value``."""
    low = min(low, math.floor(math.log10(value)))
    high = max(high, math.ceil(math.log10(value)))
    return widgets.FloatLogSlider(value=value, base=10, min=low, max=high, description=description)


def filter_rows(table: pd.DataFrame, **chosen: object) -> pd.DataFrame:
    """The rows of ``table`` whose columns have the chosen values (``ALL``: any)."""
    for column, value in chosen.items():
        if column not in table:
            raise ValueError(f"no column {column!r}; valid: {', '.join(table.columns)}")
        if value != ALL:
            table = table[table[column].astype(str) == str(value)]
    return table


def results_explorer(
    table: pd.DataFrame,
    filters: list[str],
    columns: list[str],
    defaults: dict | None = None,
    plot: tuple[str, str] | None = None,
) -> widgets.interactive:
    """A menu per column of ``filters`` (its values, or ``ALL``) over a saved sweep
    (``table``, read from its CSV): the matching rows' ``filters`` and ``columns``, and with
    ``plot = (x, y)`` a figure of y against x of those rows (in the widget only). Nothing is
    measured again."""
    for name, value in (("filters", filters), ("columns", columns)):
        if isinstance(value, str) or not all(isinstance(c, str) for c in value):
            raise ValueError(f"{name} must be a list of column names, got {value!r}")
    missing = [c for c in [*filters, *columns, *(plot or ())] if c not in table]
    if missing:
        raise ValueError(f"no column {', '.join(missing)}; valid: {', '.join(table.columns)}")
    defaults = defaults or {}
    menus = {
        column: widgets.Dropdown(
            options=[ALL, *sorted(table[column].astype(str).unique())],
            value=str(defaults.get(column, ALL)),
            description=column,
        )
        for column in filters
    }

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

    return widgets.interactive(show, SHOW_RESULT, **menus)


#: What a ``MeasureNow`` control's tables show of a configuration: the fields it sets, and (in
#: the planned table) the warm-up and device it keeps from its defaults.
CHOSEN_FIELDS = ("preset", "mode", "context_length", "batch_size", "dtype", "steps")
PLANNED_FIELDS = (*CHOSEN_FIELDS, "warmup", "device")


class MeasureNow(widgets.interactive):
    """Menus for one benchmark configuration (preset, mode, context, batch, dtype, timed steps)
    and a "measure now" button: a click times that configuration in this kernel, appends its
    row to ``path`` (``benchmark_sweep`` with ``resume=False``: measured again even if saved)
    and shows it. The other fields (warm-up, device) are ``defaults``'s; the model's shape is
    the chosen preset's.

    Nothing runs until the button is pressed; ``planned()`` is the table to show without a
    front end: the chosen configuration and the median last saved for it, in ``path`` or else
    in ``sweep`` (the sweep's own results file, which the control never writes).
    """

    def __init__(
        self,
        path,
        defaults: BenchConfig,
        presets: list[str],
        metadata: dict | None = None,
        sweep=None,
    ) -> None:
        for preset in presets:
            get_preset(preset)  # a clear error for an unknown name
        if defaults.preset not in presets:
            raise ValueError(
                f"defaults.preset {defaults.preset!r} is not among the presets "
                f"offered: {', '.join(presets)}"
            )
        self.path, self.defaults, self.metadata = path, defaults, metadata
        self.sources = [path] + ([sweep] if sweep is not None else [])
        contexts = sorted({2**i for i in range(5, 14)} | {defaults.context_length})
        batches = sorted({2**i for i in range(8)} | {defaults.batch_size})
        super().__init__(
            self.measure,
            {**SHOW_RESULT, "manual": True, "manual_name": "measure now"},
            preset=widgets.Dropdown(options=presets, value=defaults.preset, description="preset"),
            mode=widgets.Dropdown(options=MODES, value=defaults.mode, description="mode"),
            context_length=widgets.Dropdown(
                options=contexts, value=defaults.context_length, description="context"
            ),
            batch_size=widgets.Dropdown(
                options=batches, value=defaults.batch_size, description="batch"
            ),
            dtype=widgets.Dropdown(options=list(DTYPES), value=defaults.dtype, description="dtype"),
            steps=widgets.IntSlider(
                value=defaults.steps, min=1, max=max(50, defaults.steps), description="steps"
            ),
        )

    def config(self, **chosen: object) -> BenchConfig:
        """The configuration of the controls' current values (or of ``chosen``)."""
        values = {w._kwarg: w.get_interact_value() for w in self.kwargs_widgets} | chosen
        if values["preset"] != self.defaults.preset:  # that preset's own shape, not the default's
            values |= dict.fromkeys(MODEL_FIELDS)
        return dataclasses.replace(self.defaults, **values)

    def planned(self) -> pd.DataFrame:
        """The chosen configuration, with the median last saved for it in ``path`` or else in
        ``sweep`` (NaN when neither holds it)."""
        config = self.config()
        row = {k: v for k, v in config.as_dict().items() if k in PLANNED_FIELDS}
        row["saved_median_s"] = float("nan")
        for source in self.sources:
            saved = BenchConfig.sweep(source).select([config.as_dict()])
            if not saved.empty and saved["status"].iloc[-1] == "ok":
                row["saved_median_s"] = saved["median_s"].iloc[-1]
                break
        return pd.DataFrame([row])

    def measure(self, **chosen: object) -> pd.DataFrame:
        """Time the configuration of ``chosen`` now, append its row to ``path``, return its
        timing table."""
        config = self.config(**chosen)
        rows = benchmark_sweep(
            self.path, [config], resume=False, metadata=self.metadata, desc="measure now"
        )
        return timing_table(rows, keys=CHOSEN_FIELDS)
