"""Profiling, a script's front door: traces, kernel summaries and hotspot analysis, which live
in the measuring core (``perflab.measure``: ``capture``, ``trace``, ``summary``, ``hotspots``,
``nsys``), and where a step copies memory (``copies``, notebook 02's experiment).

``kernel_hotspots(trace_path, top=None)`` and ``compare_traces(baseline, optimized)`` work on
any Chrome/Kineto trace; ``perflab hotspots`` is their command line.
"""

from perflab.measure.hotspots import (
    CATEGORIES,
    TraceComparison,
    category_shares,
    classify,
    compare_traces,
    kernel_hotspots,
)
from perflab.measure.summary import KernelSummary, kernel_summary
from perflab.measure.trace import Trace, TraceError, load_trace

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
