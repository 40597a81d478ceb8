"""Profiling: named ranges, traces, kernel summaries and hotspot analysis (notebook 02).

``kernel_hotspots(trace_path, top=None)`` and ``compare_traces(baseline, optimized)`` work on
any Chrome/Kineto trace; ``perflab hotspots`` is their command line.
"""

from perflab.profiling.hotspots import (
    CATEGORIES,
    TraceComparison,
    category_shares,
    classify,
    compare_traces,
    kernel_hotspots,
)
from perflab.profiling.summary import KernelSummary, kernel_summary
from perflab.profiling.trace import Trace, TraceError, load_trace

__all__ = [
    "CATEGORIES",
    "KernelSummary",
    "Trace",
    "TraceComparison",
    "TraceError",
    "category_shares",
    "classify",
    "compare_traces",
    "kernel_hotspots",
    "kernel_summary",
    "load_trace",
]
