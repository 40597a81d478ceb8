"""The front door of notebook 01, "Benchmarking: how long does a training step take, and how good is
that?". The names `notebooks/01_benchmarking.ipynb` uses from the library, each imported from where
it lives (open that module for its source). This package also holds the experiments that this
notebook alone runs (``warmup``).
"""

from perflab.bench import MODES, BenchConfig
from perflab.bench.steps import benchmark_sweep, compare_configs
from perflab.implementations.model import presets_table
from perflab.lessons import open_notebook
from perflab.lessons.nb01_benchmarking.warmup import (
    measure_in_fresh_process,
    warmup_configs,
    warmup_effect,
    warmup_finding,
    warmup_samples,
)
from perflab.measure.comparison import comparison_frame
from perflab.measure.conclusions import conclude, conclude_all
from perflab.measure.crosscheck import compare_timers, matmul_size_for
from perflab.measure.device import parse_dtype
from perflab.measure.paths import listing, results_elsewhere
from perflab.measure.peak import measure_peak_matmul
from perflab.measure.tables import (
    mfu_lines,
    phase_breakdown,
    phase_findings,
    throughput,
    timing_table,
)
from perflab.plots.bench import plot_phases, plot_warmup
from perflab.tools.widgets import MeasureNow, results_explorer

__all__ = [
    "BenchConfig",
    "MODES",
    "MeasureNow",
    "benchmark_sweep",
    "compare_configs",
    "compare_timers",
    "comparison_frame",
    "conclude",
    "conclude_all",
    "listing",
    "matmul_size_for",
    "measure_in_fresh_process",
    "measure_peak_matmul",
    "mfu_lines",
    "open_notebook",
    "parse_dtype",
    "phase_breakdown",
    "phase_findings",
    "plot_phases",
    "plot_warmup",
    "presets_table",
    "results_elsewhere",
    "results_explorer",
    "throughput",
    "timing_table",
    "warmup_configs",
    "warmup_effect",
    "warmup_finding",
    "warmup_samples",
]
