"""Nsight's per-kernel summary table, from a torch.profiler trace or from nsys itself.

The columns are those of ``nsys stats --report cuda_gpu_kern_sum``: Time (%), Total Time (ns),
Instances, Avg (ns), Med (ns), Min (ns), Max (ns), StdDev (ns), Name, so both sources feed the
same tables. From a trace the table can be restricted to a named range ("forward", "backward",
"optimizer", "step", ...), kernels by where they were launched. A trace without device kernels
(a CPU run) is summarised by CPU operators' self time instead, and the result says so in
``source``. Used by notebook 02.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from perflab.measure.hotspots import classify, shares_by_category
from perflab.measure.trace import (
    CPU_RANGE,
    GPU_RANGE,
    Trace,
    kernels_launched_in,
    timed_events,
)

SUMMARY_COLUMNS = [
    "Time (%)",
    "Total Time (ns)",
    "Instances",
    "Avg (ns)",
    "Med (ns)",
    "Min (ns)",
    "Max (ns)",
    "StdDev (ns)",
    "Name",
]


@dataclass(frozen=True)
class KernelSummary:
    """A cuda_gpu_kern_sum-style table and what it was computed from."""

    table: pd.DataFrame  # SUMMARY_COLUMNS, sorted by total time, descending
    source: str  # DEVICE_KERNELS, CPU_OPERATORS or "nsys cuda_gpu_kern_sum"
    range_name: str | None  # the range it is restricted to; None: the whole trace

    @property
    def total_ns(self) -> float:
        return float(self.table["Total Time (ns)"].sum())

    def with_categories(self) -> pd.DataFrame:
        """The table with each name's category (``perflab.measure.hotspots.classify``)."""
        return self.table.assign(category=self.table["Name"].map(classify))

    def not_matmul(self, at_least: float = 1.0) -> pd.DataFrame:
        """The rows that are not compute-bound (not matmuls) with at least ``at_least`` percent
        of the time: what else the range spends its time on (the handout's nsys_profile (c))."""
        table = self.with_categories()
        return table[(table["category"] != "compute-bound") & (table["Time (%)"] >= at_least)]

    def category_shares(self) -> pd.Series:
        """Share of the total time per category (all four, zeros included)."""
        return shares_by_category(self.table["Name"], self.table["Total Time (ns)"])


def summarize_durations(names: pd.Series, durations_ns: pd.Series) -> pd.DataFrame:
    """Per-name statistics of durations in the cuda_gpu_kern_sum layout."""
    grouped = pd.DataFrame({"Name": names.to_numpy(), "ns": durations_ns.to_numpy()}).groupby(
        "Name"
    )["ns"]
    table = pd.DataFrame(
        {
            "Total Time (ns)": grouped.sum(),
            "Instances": grouped.size(),
            "Avg (ns)": grouped.mean(),
            "Med (ns)": grouped.median(),
            "Min (ns)": grouped.min(),
            "Max (ns)": grouped.max(),
            "StdDev (ns)": grouped.std(ddof=1).fillna(0.0),  # nsys: sample std, 0 for one
        }
    ).reset_index()
    table.insert(0, "Time (%)", 100 * table["Total Time (ns)"] / table["Total Time (ns)"].sum())
    table = table.sort_values("Total Time (ns)", ascending=False, kind="stable")
    return table[SUMMARY_COLUMNS].reset_index(drop=True)


def range_names(trace: Trace) -> list[str]:
    """Names of the record_function / NVTX ranges in the trace."""
    ranges = trace.events[trace.events["cat"].isin([CPU_RANGE, GPU_RANGE])]
    return sorted(set(ranges["name"]))


def _ranges_named(trace: Trace, range_name: str) -> pd.DataFrame:
    """The CPU-side spans of the range ``range_name``, or a ValueError listing the ranges."""
    ranges = trace.of(CPU_RANGE)
    ranges = ranges[ranges["name"] == range_name]
    if ranges.empty:
        valid = ", ".join(range_names(trace)) or "none"
        raise ValueError(f"{trace.path.name} has no range {range_name!r}; ranges: {valid}")
    return ranges


def kernel_summary(trace: Trace, range_name: str | None = None) -> KernelSummary:
    """Per-kernel summary of ``trace``, optionally only inside the range ``range_name``.

    Device kernels count for a range when they were launched inside it
    (``kernels_launched_in``); CPU operators when they ran inside it.
    """
    ranges = None if range_name is None else _ranges_named(trace, range_name)
    events, source = timed_events(trace, ranges)
    table = summarize_durations(events["name"], events["us"] * 1e3)  # trace microseconds -> ns
    return KernelSummary(table, source, range_name)


def range_totals(trace: Trace, names: tuple[str, ...] | list[str]) -> pd.DataFrame:
    """Instances and total microseconds of each named range: the device time of the kernels
    launched inside it when the trace has kernels, its CPU-side span otherwise."""
    ranges = trace.of(CPU_RANGE)
    rows = []
    for name in names:
        spans = ranges[ranges["name"] == name]
        if trace.has_kernels:
            total = float(kernels_launched_in(trace, spans)["dur"].sum()) if len(spans) else 0.0
        else:
            total = float(spans["dur"].sum())
        rows.append({"range": name, "instances": len(spans), "total_us": total})
    return pd.DataFrame(rows)
