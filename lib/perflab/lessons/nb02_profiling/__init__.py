"""The front door of notebook 02, "Profiling: where does the time go, and what bounds it?". The
names `notebooks/02_profiling.ipynb` uses from the library, each imported from where it lives (open
that module for its source). This package also holds the experiments that this notebook alone runs
(``grid``, ``layer_norm_study``, ``step_trace``), and its own sentences, computed from their
numbers (``findings``).
"""

from perflab.bench import BenchConfig, run_benchmark
from perflab.implementations.layer_norm import LAYER_NORMS
from perflab.implementations.model import get_preset
from perflab.lessons import open_notebook
from perflab.lessons.nb02_profiling import findings as say
from perflab.lessons.nb02_profiling.grid import grid_answers, profile_grid
from perflab.lessons.nb02_profiling.layer_norm_study import (
    check_layer_norms,
    compare_layer_norms,
    reduction_counts,
    statistics_times,
)
from perflab.lessons.nb02_profiling.step_trace import attention_time_vs_flops, record_step_trace
from perflab.measure.conclusions import Finding, conclude_all
from perflab.measure.hotspots import busy_fraction, category_shares, short_name
from perflab.measure.nsys import nsys_available, nsys_kernel_summary
from perflab.measure.paths import REPO_ROOT, display_path, listing
from perflab.measure.peak import measure_copy_bandwidth
from perflab.measure.summary import range_names, range_totals
from perflab.plots.profiling import plot_category_comparison, plot_hotspots
from perflab.profiling import compare_traces, kernel_hotspots, kernel_summary, load_trace
from perflab.training.step_profile import compare_mask_copy, step_copy_sites

__all__ = [
    "BenchConfig",
    "Finding",
    "LAYER_NORMS",
    "REPO_ROOT",
    "attention_time_vs_flops",
    "busy_fraction",
    "category_shares",
    "check_layer_norms",
    "compare_layer_norms",
    "compare_mask_copy",
    "compare_traces",
    "conclude_all",
    "display_path",
    "get_preset",
    "grid_answers",
    "kernel_hotspots",
    "kernel_summary",
    "listing",
    "load_trace",
    "measure_copy_bandwidth",
    "nsys_available",
    "nsys_kernel_summary",
    "open_notebook",
    "plot_category_comparison",
    "plot_hotspots",
    "profile_grid",
    "range_names",
    "range_totals",
    "record_step_trace",
    "reduction_counts",
    "run_benchmark",
    "say",
    "short_name",
    "statistics_times",
    "step_copy_sites",
]
